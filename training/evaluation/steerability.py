"""Steerability of prefix embeddings (V5 paper, Eq. 1 and appendix I), on accuracy tables.

Every function takes an accuracy table ``[level, prefix]``: row 0 is the coarsest level, the last
row the finest, columns are the prefix lengths in increasing order (``j1 … jJ``). With three or
more levels, "coarse" is level 0 and "fine" the last level, so :func:`steerability` is the paper's
``S_02`` on a three-level table; the middle levels are read only by :func:`prefix_ramp`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


def _checked(accuracy: np.ndarray) -> np.ndarray:
    table = np.asarray(accuracy, dtype=np.float64)
    if table.ndim != 2 or table.shape[0] < 2 or table.shape[1] < 2:
        raise ValueError(
            f"expected an accuracy table [level, prefix] with at least 2 levels and 2 prefixes, "
            f"got shape {table.shape}"
        )
    return table


def steerability(accuracy: np.ndarray) -> float:
    """Eq. 1: ``S = (L0@j1 − L0@jJ) + (Lfine@jJ − Lfine@j1)``.

    Positive when the shortest prefix favours the coarse level and the full vector the fine one.
    """
    table = _checked(accuracy)
    coarse, fine = table[0], table[-1]
    return float((coarse[0] - coarse[-1]) + (fine[-1] - fine[0]))


def steerability_auc(accuracy: np.ndarray) -> float:
    """``S_AUC``: mean of Eq. 1 between the first prefix and each longer prefix ``j = 2 … J``.

    The paper's "average steerability over all prefix pairs k = 2, 3, 4" read as the pairs
    ``(j1, jk)``: with four prefixes, ``(S(j1, j2) + S(j1, j3) + S(j1, j4)) / 3``.
    """
    table = _checked(accuracy)
    return float(np.mean([steerability(table[:, [0, j]]) for j in range(1, table.shape[1])]))


def steerability_mono(accuracy: np.ndarray) -> float:
    """``S_mono``: fraction of adjacent prefix pairs ``(j, j+1)`` that move the right way.

    A pair counts when coarse accuracy does not rise (``L0@j+1 ≤ L0@j``) *and* fine accuracy
    does not fall (``Lfine@j+1 ≥ Lfine@j``); ties count as monotonic. In ``[0, 1]``.
    """
    table = _checked(accuracy)
    coarse_steps, fine_steps = np.diff(table[0]), np.diff(table[-1])
    return float(np.mean((coarse_steps <= 0) & (fine_steps >= 0)))


def steerability_gap(accuracy: np.ndarray) -> float:
    """``S_gap = (L0@j1 − Lfine@j1) − (L0@jJ − Lfine@jJ)``: how much the coarse-over-fine lead
    shrinks from the shortest prefix to the full vector.

    Algebraically the same sum of four terms as Eq. 1, so it equals :func:`steerability` up to
    rounding (the paper's Table 10 shows identical ΔS_orig and ΔS_gap columns for that reason).
    """
    table = _checked(accuracy)
    return float((table[0, 0] - table[-1, 0]) - (table[0, -1] - table[-1, -1]))


def prefix_ramp(accuracy: np.ndarray) -> np.ndarray:
    """Per level, accuracy at the longest prefix minus accuracy at the shortest (Tables 7, 8)."""
    table = _checked(accuracy)
    return table[:, -1] - table[:, 0]


@dataclass(frozen=True)
class SteerabilityScores:
    """The four steerability formulations of one accuracy table."""

    s: float
    s_auc: float
    s_mono: float
    s_gap: float

    @classmethod
    def from_table(cls, accuracy: np.ndarray) -> SteerabilityScores:
        """All four scores of an accuracy table ``[level, prefix]``."""
        return cls(
            s=steerability(accuracy),
            s_auc=steerability_auc(accuracy),
            s_mono=steerability_mono(accuracy),
            s_gap=steerability_gap(accuracy),
        )

    def to_dict(self) -> dict[str, float]:
        """``{"s": …, "s_auc": …, "s_mono": …, "s_gap": …}``."""
        return asdict(self)
