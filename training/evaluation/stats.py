"""Statistics across seeds (V5 paper, §2 "Statistical methodology").

Seeds are the unit of replication: a method's score is reported as mean ± sample SD over seeds,
two methods are compared with a paired t-test over the seeds they share, the effect size is the
paired Cohen's d, and a family of comparisons is corrected with Holm–Bonferroni.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats


def seed_mean_sd(values: Sequence[object] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sample standard deviation (``ddof=1``) over the first axis (the seeds).

    Works on stacked tables as well as on plain lists; with a single seed the SD is ``nan``.
    """
    array = np.asarray(values, dtype=np.float64)
    if array.ndim == 0 or len(array) == 0:
        raise ValueError("the mean and SD over seeds need at least one seed")
    mean = np.mean(array, axis=0)
    sd = np.std(array, axis=0, ddof=1) if len(array) > 1 else np.full_like(mean, math.nan)
    return mean, sd


def mean_sd(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and sample standard deviation (``ddof=1``) of one score over seeds."""
    mean, sd = seed_mean_sd(values)
    return float(mean), float(sd)


_ROUNDING = 1e-12
"""Differences that vary by less than this (relative to their mean) count as constant."""


@dataclass(frozen=True)
class PairedComparison:
    """Paired comparison of ``a`` against ``b`` over ``n`` matched seeds (``diff = a − b``)."""

    n: int
    mean_diff: float
    t: float
    p: float
    cohens_d: float

    def to_dict(self) -> dict[str, float]:
        """The fields as a plain dictionary."""
        return asdict(self)


def paired_comparison(
    a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray
) -> PairedComparison:
    """Two-sided paired t-test (``scipy.stats.ttest_rel``) and paired Cohen's d.

    ``d = mean(a − b) / sd(a − b, ddof=1)``. When every difference is the same, up to rounding,
    neither statistic is finite: a non-zero constant difference gives ``t = d = ±inf`` and
    ``p = 0``; identical samples give ``t = d = p = nan``.
    """
    a_values, b_values = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a_values.ndim != 1 or a_values.shape != b_values.shape or a_values.size < 2:
        raise ValueError(
            f"a paired comparison needs two equal-length samples of ≥ 2 values, "
            f"got shapes {a_values.shape} and {b_values.shape}"
        )
    diff = a_values - b_values
    mean = float(np.mean(diff))
    if np.ptp(diff) <= _ROUNDING * max(1.0, abs(mean)):
        constant = abs(mean) > _ROUNDING
        infinite = math.copysign(math.inf, mean) if constant else math.nan
        return PairedComparison(
            n=diff.size,
            mean_diff=mean,
            t=infinite,
            p=0.0 if constant else math.nan,
            cohens_d=infinite,
        )
    result = stats.ttest_rel(a_values, b_values)
    return PairedComparison(
        n=diff.size,
        mean_diff=mean,
        t=float(result.statistic),
        p=float(result.pvalue),
        cohens_d=mean / float(np.std(diff, ddof=1)),
    )


def holm_adjust(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm–Bonferroni adjusted p-values, in the input order.

    The ``i``-th smallest of ``m`` p-values is multiplied by ``m − i + 1`` (``i`` from 1), made
    non-decreasing along that order, and capped at 1; reject where the adjusted value is ≤ α.
    """
    p = np.asarray(p_values, dtype=np.float64)
    order = np.argsort(p, kind="stable")
    scaled = p[order] * (p.size - np.arange(p.size))
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(np.maximum.accumulate(scaled), 1.0)
    return adjusted
