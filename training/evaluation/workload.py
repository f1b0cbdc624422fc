"""Mixed coarse/fine query workloads (V5 paper, §7 "Workload-adaptive Pareto advantage", Fig. 9).

A workload is a mix: a fraction ``α`` of queries is coarse, judged on level 0, and ``1 − α`` is
fine, judged on the finest level. A routing policy answers coarse queries at ``coarse_dim`` and
fine queries at ``fine_dim``; its expected accuracy and mean dimension are linear in ``α``:

    accuracy(α) = α · L0@coarse_dim + (1 − α) · Lfine@fine_dim
    mean_dim(α) = α · coarse_dim + (1 − α) · fine_dim

The adaptive policy is ``coarse_dim = 64, fine_dim = 256``; a fixed-dimension policy uses the same
dimension for both (e.g. "MRL-256d": ``coarse_dim = fine_dim = 256``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ALPHAS: np.ndarray = np.linspace(0.0, 1.0, 21)
"""The paper's grid of coarse fractions: 0, 0.05, …, 1."""


@dataclass(frozen=True)
class WorkloadCurve:
    """Expected accuracy and mean query dimension of one policy, at each coarse fraction."""

    alphas: np.ndarray
    accuracy: np.ndarray
    mean_dim: np.ndarray


def workload_curve(
    accuracy: np.ndarray,
    prefix_dims: list[int],
    *,
    coarse_dim: int | None = None,
    fine_dim: int | None = None,
    alphas: np.ndarray = ALPHAS,
) -> WorkloadCurve:
    """The mixed-workload curve of a k-NN accuracy table ``[level, prefix]``.

    ``coarse_dim`` defaults to the shortest prefix and ``fine_dim`` to the longest (the adaptive
    policy); both must be in ``prefix_dims``.
    """
    coarse_dim = prefix_dims[0] if coarse_dim is None else coarse_dim
    fine_dim = prefix_dims[-1] if fine_dim is None else fine_dim
    for dim in (coarse_dim, fine_dim):
        if dim not in prefix_dims:
            raise ValueError(f"dimension {dim} is not one of the prefixes {prefix_dims}")
    coarse = float(accuracy[0, prefix_dims.index(coarse_dim)])
    fine = float(accuracy[-1, prefix_dims.index(fine_dim)])
    alphas = np.asarray(alphas, dtype=np.float64)
    return WorkloadCurve(
        alphas=alphas,
        accuracy=alphas * coarse + (1.0 - alphas) * fine,
        mean_dim=alphas * coarse_dim + (1.0 - alphas) * fine_dim,
    )


def crossover_alpha(
    challenger: np.ndarray, incumbent: np.ndarray, alphas: np.ndarray = ALPHAS
) -> float | None:
    """The smallest ``α`` on the grid from which ``challenger`` accuracy is strictly higher than
    ``incumbent`` accuracy at that ``α`` and at every larger one; ``None`` when it is not higher
    at ``α = 1``.

    Both arguments are accuracy curves over ``alphas`` (e.g. the seed means of V5 adaptive and of
    MRL fixed at 256d). The paper's "V5 dominates MRL-256d whenever ≥ 35 % of queries are coarse"
    is a crossover of 0.35.
    """
    wins = np.asarray(challenger) > np.asarray(incumbent)
    if not wins[-1]:
        return None
    losses = np.flatnonzero(~wins)
    first = 0 if losses.size == 0 else int(losses[-1]) + 1
    return float(alphas[first])
