"""Inverted alignment, the first causal ablation of the Fractal paper (§5).

V5's schedule read backwards: the shortest prefix learns the finest level and the full vector
the coarsest. The paper predicts (Corollary 1) and finds a negative steerability.
"""

from __future__ import annotations

import numpy as np

from training.objectives.base import PrefixSupervisionLoss
from training.objectives.v5 import v5_schedule


def inverted_schedule(num_prefixes: int, depth: int) -> np.ndarray:
    return v5_schedule(num_prefixes, depth)[::-1].copy()


class InvertedLoss(PrefixSupervisionLoss):
    make_schedule = staticmethod(inverted_schedule)
