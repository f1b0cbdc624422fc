"""No-prefix ablation of the Fractal paper (§5): alignment removed.

"All prefix lengths trained on L1 with L0 regularisation": every prefix gets the same row,
mostly the finest level with a fixed share for the coarser ones (``COARSE_SHARE``, split evenly),
so the coarse labels are in the loss but no prefix length is tied to them.
"""

from __future__ import annotations

import numpy as np

from training.objectives.base import PrefixSupervisionLoss

COARSE_SHARE = 0.3


def no_prefix_schedule(num_prefixes: int, depth: int) -> np.ndarray:
    row = np.full(depth, COARSE_SHARE / (depth - 1))
    row[-1] = 1.0 - COARSE_SHARE
    return np.tile(row, (num_prefixes, 1))


class NoPrefixLoss(PrefixSupervisionLoss):
    make_schedule = staticmethod(no_prefix_schedule)
