"""V5, progressive prefix supervision (Fractal Embeddings paper, §3, Eq. 2–3, Algorithm 1).

The shortest prefix learns the coarsest level, the full vector the finest, the prefixes between
blend the two with ``α = [1, 0.7, 0.3, 0]`` (``α_2 = 0.7``, ``α_3 = 0.3``):
``L = CE(head_fine(e), y_fine) + 0.6 · L_prefix(j)``, ``j ~ [0.4, 0.3, 0.2, 0.1]``.
With more than two levels the α's place each prefix between adjacent levels
(:func:`interpolated_schedule`).
"""

from __future__ import annotations

import numpy as np

from training.objectives.base import PrefixSupervisionLoss, interpolated_schedule

PAPER_COARSE_WEIGHTS = (1.0, 0.7, 0.3, 0.0)


def v5_schedule(num_prefixes: int, depth: int) -> np.ndarray:
    """Coarse-to-fine schedule: prefix 1 → level 0, last prefix → finest level."""
    if num_prefixes == len(PAPER_COARSE_WEIGHTS):
        coarse_weights = PAPER_COARSE_WEIGHTS
    else:
        coarse_weights = tuple(np.linspace(1.0, 0.0, num_prefixes))
    return interpolated_schedule(coarse_weights, depth)


class V5Loss(PrefixSupervisionLoss):
    make_schedule = staticmethod(v5_schedule)
