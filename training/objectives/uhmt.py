"""UHMT, uniform hierarchical multi-task: the "awareness is not alignment" ablation (§5).

Every prefix is trained on all levels with equal weight (``0.5·L0 + 0.5·L1`` for two levels):
hierarchy-aware, not hierarchy-aligned. The paper finds steerability ≈ 0 (Corollary 2).
"""

from __future__ import annotations

import numpy as np

from training.objectives.base import PrefixSupervisionLoss


def uhmt_schedule(num_prefixes: int, depth: int) -> np.ndarray:
    return np.full((num_prefixes, depth), 1.0 / depth)


class UHMTLoss(PrefixSupervisionLoss):
    make_schedule = staticmethod(uhmt_schedule)
