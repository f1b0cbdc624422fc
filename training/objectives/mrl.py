"""MRL, the matched baseline (Fractal paper, Eq. 4; Kusupati et al., 2022).

Every prefix is trained on the finest level: ``L_MRL(j) = CE(head_fine(e_{1:j}), y_fine)``.
Everything else (head, sampling, block dropout, optimiser) is V5's, so a difference between the
two is caused by the prefix-to-level alignment alone.
"""

from __future__ import annotations

import numpy as np

from training.objectives.base import PrefixSupervisionLoss


def mrl_schedule(num_prefixes: int, depth: int) -> np.ndarray:
    schedule = np.zeros((num_prefixes, depth))
    schedule[:, -1] = 1.0
    return schedule


class MRLLoss(PrefixSupervisionLoss):
    make_schedule = staticmethod(mrl_schedule)
