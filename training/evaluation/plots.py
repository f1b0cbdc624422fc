"""PNG plots for the evaluation report, drawn with matplotlib's Agg canvas (no display, no pyplot).

Curves are passed as ``{method: (mean, sd)}`` over seeds; a ±1 SD band is drawn wherever the SD
is finite (it is ``nan`` for a method with a single seed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

MeanSd = tuple[np.ndarray, np.ndarray]


def _line_with_band(
    axes: Axes, x: np.ndarray, mean: np.ndarray, sd: np.ndarray, **style: object
) -> None:
    (line,) = axes.plot(x, mean, **style)
    if np.all(np.isfinite(sd)):
        axes.fill_between(x, mean - sd, mean + sd, color=line.get_color(), alpha=0.2, linewidth=0)


def plot_accuracy_by_prefix(
    path: Path,
    prefix_dims: Sequence[int],
    level_names: Sequence[str],
    curves: Mapping[str, MeanSd],
    *,
    title: str = "k-NN accuracy by prefix length",
) -> None:
    """One panel per level, one line per method: accuracy ``[level, prefix]`` against prefix."""
    figure = Figure(figsize=(4.0 * len(level_names), 3.6), layout="constrained")
    FigureCanvasAgg(figure)
    panels = figure.subplots(1, len(level_names), squeeze=False)[0]
    x = np.asarray(prefix_dims, dtype=np.float64)
    for level, (axes, name) in enumerate(zip(panels, level_names, strict=True)):
        for method, (mean, sd) in curves.items():
            _line_with_band(axes, x, mean[level], sd[level], marker="o", label=method)
        axes.set_title(name)
        axes.set_xlabel("prefix dimension")
        axes.set_xticks(x)
        axes.grid(alpha=0.3)
    panels[0].set_ylabel("accuracy")
    panels[0].legend()
    figure.suptitle(title)
    figure.savefig(path, dpi=120)


def plot_workload(
    path: Path,
    alphas: np.ndarray,
    adaptive: Mapping[str, MeanSd],
    fixed: Mapping[str, MeanSd],
    *,
    coarse_dim: int,
    full_dim: int,
) -> None:
    """Mixed-workload accuracy against the coarse fraction ``α``: each method's adaptive policy
    (solid) and fixed full-dimension policy (dashed), in the same colour; the top axis gives the
    adaptive policy's mean query dimension."""
    figure = Figure(figsize=(6.4, 4.2), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    for index, method in enumerate(adaptive):
        colour = f"C{index}"
        mean, sd = adaptive[method]
        _line_with_band(
            axes,
            alphas,
            mean,
            sd,
            color=colour,
            label=f"{method} adaptive {coarse_dim}/{full_dim}d",
        )
        if method in fixed:
            mean, sd = fixed[method]
            _line_with_band(
                axes, alphas, mean, sd, color=colour, linestyle="--", label=f"{method} {full_dim}d"
            )
    span = full_dim - coarse_dim
    if span > 0:
        top = axes.secondary_xaxis(
            "top", functions=(lambda a: full_dim - a * span, lambda d: (full_dim - d) / span)
        )
        top.set_xlabel("adaptive mean dimension")
    axes.set_xlabel("α (fraction of coarse queries)")
    axes.set_ylabel("mixed accuracy")
    axes.set_xlim(0.0, 1.0)
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    figure.savefig(path, dpi=120)
