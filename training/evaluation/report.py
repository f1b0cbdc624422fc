"""The evaluation report over several runs (methods × seeds): ``report.json``, ``report.md`` and
two PNG plots (accuracy by prefix, mixed workload).

Generic over methods (``raw``, ``v5``, ``mrl``, ablations …) and over the number of label levels:
every score is summarised per method as mean ± sample SD over its seeds, and each requested pair
of methods is compared with a paired t-test over the seeds both have (V5 paper, §2), Holm-adjusted
per metric across the pairs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bundle import LABEL_PATH_SEPARATOR
from training.data.dataset import LabelHierarchy
from training.evaluation.evaluate import EmbeddingEvaluation
from training.evaluation.plots import MeanSd, plot_accuracy_by_prefix, plot_workload
from training.evaluation.stats import (
    PairedComparison,
    holm_adjust,
    mean_sd,
    paired_comparison,
    seed_mean_sd,
)
from training.evaluation.workload import ALPHAS, crossover_alpha, workload_curve

METRICS: dict[str, str] = {
    "s": "S",
    "s_auc": "S_AUC",
    "s_mono": "S_mono",
    "s_gap": "S_gap",
    "fine_full": "finest-level accuracy @ full dim",
}
"""Per-run scalar scores, by key, with their column titles."""

WORKLOAD_ROWS = (0.0, 0.25, 0.5, 0.75, 1.0)
"""Coarse fractions listed in the Markdown workload table (the JSON has the whole grid)."""


@dataclass(frozen=True)
class RunResult:
    """The evaluation of one method trained with one seed."""

    method: str
    seed: int
    evaluation: EmbeddingEvaluation


@dataclass(frozen=True)
class MethodSummary:
    """One method's scores over its seeds, each as (mean, sample SD)."""

    method: str
    seeds: list[int]
    knn_accuracy: MeanSd
    recall_at_1: MeanSd
    metrics: dict[str, tuple[float, float]]
    adaptive_workload: MeanSd
    fixed_workload: MeanSd


@dataclass(frozen=True)
class MethodComparison:
    """Method ``a`` against method ``b`` on one metric, paired by seed."""

    a: str
    b: str
    metric: str
    result: PairedComparison
    p_holm: float


@dataclass(frozen=True)
class ReportFiles:
    """Where :func:`write_report` put its outputs."""

    json: Path
    markdown: Path
    accuracy_plot: Path
    workload_plot: Path


def _metric_values(evaluation: EmbeddingEvaluation) -> dict[str, float]:
    return {
        **evaluation.steerability.to_dict(),
        "fine_full": float(evaluation.knn_accuracy[-1, -1]),
    }


def _by_method(runs: Sequence[RunResult]) -> dict[str, dict[int, EmbeddingEvaluation]]:
    """Runs grouped by method (in order of first appearance), then by seed; checks consistency."""
    if not runs:
        raise ValueError("a report needs at least one run")
    first = runs[0].evaluation
    expected = (first.prefix_dims, first.knn_accuracy.shape, first.k)
    grouped: dict[str, dict[int, EmbeddingEvaluation]] = {}
    for run in runs:
        evaluation = run.evaluation
        found = (evaluation.prefix_dims, evaluation.knn_accuracy.shape, evaluation.k)
        if found != expected:
            raise ValueError(
                f"run {run.method}/{run.seed} has (prefixes, table shape, k) = {found}; "
                f"the first run has {expected}"
            )
        seeds = grouped.setdefault(run.method, {})
        if run.seed in seeds:
            raise ValueError(f"two runs of {run.method} with seed {run.seed}")
        seeds[run.seed] = evaluation
    return grouped


def summarise(
    runs: Sequence[RunResult], *, coarse_dim: int | None = None
) -> dict[str, MethodSummary]:
    """Mean ± SD over seeds of every score, per method; workload curves on the ``ALPHAS`` grid
    (adaptive: coarse queries at ``coarse_dim``, default the shortest prefix; fixed: all at the
    full dimension)."""
    summaries = {}
    for method, by_seed in _by_method(runs).items():
        evaluations = list(by_seed.values())
        prefix_dims = evaluations[0].prefix_dims
        full_dim = prefix_dims[-1]
        per_run = [_metric_values(evaluation) for evaluation in evaluations]
        summaries[method] = MethodSummary(
            method=method,
            seeds=list(by_seed),
            knn_accuracy=seed_mean_sd([e.knn_accuracy for e in evaluations]),
            recall_at_1=seed_mean_sd([e.recall_at_1 for e in evaluations]),
            metrics={key: mean_sd([values[key] for values in per_run]) for key in METRICS},
            adaptive_workload=seed_mean_sd(
                [
                    workload_curve(e.knn_accuracy, prefix_dims, coarse_dim=coarse_dim).accuracy
                    for e in evaluations
                ]
            ),
            fixed_workload=seed_mean_sd(
                [
                    workload_curve(
                        e.knn_accuracy, prefix_dims, coarse_dim=full_dim, fine_dim=full_dim
                    ).accuracy
                    for e in evaluations
                ]
            ),
        )
    return summaries


def compare(runs: Sequence[RunResult], pairs: Sequence[tuple[str, str]]) -> list[MethodComparison]:
    """Paired comparisons ``a − b`` over shared seeds for every metric of every pair whose methods
    both ran with at least two shared seeds; p-values Holm-adjusted per metric across the pairs."""
    grouped = _by_method(runs)
    comparisons: list[MethodComparison] = []
    for key in METRICS:
        results: list[tuple[str, str, PairedComparison]] = []
        for a, b in pairs:
            shared = [seed for seed in grouped.get(a, {}) if seed in grouped.get(b, {})]
            if len(shared) < 2:
                continue
            a_values = [_metric_values(grouped[a][seed])[key] for seed in shared]
            b_values = [_metric_values(grouped[b][seed])[key] for seed in shared]
            results.append((a, b, paired_comparison(a_values, b_values)))
        adjusted = holm_adjust([result.p for _, _, result in results])
        comparisons.extend(
            MethodComparison(a=a, b=b, metric=key, result=result, p_holm=float(p_holm))
            for (a, b, result), p_holm in zip(results, adjusted, strict=True)
        )
    return comparisons


def _finite_or_none(value: Any) -> Any:
    """``value`` made JSON-safe: arrays to lists, numpy scalars to Python, nan/±inf to None."""
    if isinstance(value, dict):
        return {key: _finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(item) for item in value]
    if isinstance(value, np.ndarray):
        return _finite_or_none(value.tolist())
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def _percent(mean: float, sd: float) -> str:
    return f"{100 * mean:.1f}" if math.isnan(sd) else f"{100 * mean:.1f} ± {100 * sd:.1f}"


def _signed(mean: float, sd: float) -> str:
    return f"{mean:+.3f}" if math.isnan(sd) else f"{mean:+.3f} ± {sd:.3f}"


def _metric_cell(key: str, mean: float, sd: float) -> str:
    if key != "fine_full":
        return _signed(mean, sd)
    return f"{mean:.3f}" if math.isnan(sd) else f"{mean:.3f} ± {sd:.3f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _level_table(
    summaries: dict[str, MethodSummary],
    level_names: Sequence[str],
    prefix_dims: list[int],
    field: str,
) -> list[str]:
    header = ["level", "method", *(f"{dim}d" for dim in prefix_dims), "ramp (pp)"]
    rows = []
    for level, name in enumerate(level_names):
        for summary in summaries.values():
            mean, sd = getattr(summary, field)
            cells = [_percent(mean[level, j], sd[level, j]) for j in range(len(prefix_dims))]
            ramp = 100 * (mean[level, -1] - mean[level, 0])
            rows.append([name, summary.method, *cells, f"{ramp:+.1f}"])
    return _table(header, rows)


def _workload_table(
    summaries: dict[str, MethodSummary], coarse_dim: int, full_dim: int
) -> list[str]:
    header = ["α (coarse)", "adaptive mean dim"]
    for method in summaries:
        header += [f"{method} adaptive", f"{method} {full_dim}d"]
    rows = []
    for alpha in WORKLOAD_ROWS:
        index = int(np.argmin(np.abs(ALPHAS - alpha)))
        row = [f"{alpha:.2f}", f"{alpha * coarse_dim + (1 - alpha) * full_dim:.0f}"]
        for summary in summaries.values():
            for mean, sd in (summary.adaptive_workload, summary.fixed_workload):
                row.append(_percent(mean[index], sd[index]))
        rows.append(row)
    return _table(header, rows)


def _crossovers(
    summaries: dict[str, MethodSummary], pairs: Sequence[tuple[str, str]]
) -> list[dict[str, Any]]:
    return [
        {
            "adaptive": a,
            "fixed": b,
            "alpha": crossover_alpha(
                summaries[a].adaptive_workload[0], summaries[b].fixed_workload[0]
            ),
        }
        for a, b in pairs
        if a in summaries and b in summaries
    ]


def _markdown(
    title: str,
    summaries: dict[str, MethodSummary],
    comparisons: list[MethodComparison],
    crossovers: list[dict[str, Any]],
    level_names: Sequence[str],
    prefix_dims: list[int],
    coarse_dim: int,
    k: int,
) -> str:
    full_dim = prefix_dims[-1]
    seeds = ", ".join(f"{s.method} ({len(s.seeds)})" for s in summaries.values())
    lines = [
        f"# {title}",
        "",
        f"Prefixes: {', '.join(map(str, prefix_dims))}. Levels: {' → '.join(level_names)}. "
        f"Runs per method: {seeds}. Values are mean ± sample SD over seeds.",
        "",
        f"## k-NN accuracy (%, k = {k}, cosine on each L2-normalised prefix)",
        "",
        *_level_table(summaries, level_names, prefix_dims, "knn_accuracy"),
        "",
        "## Retrieval Recall@1 (%)",
        "",
        *_level_table(summaries, level_names, prefix_dims, "recall_at_1"),
        "",
        f"## Steerability ({level_names[0]} vs {level_names[-1]}, "
        f"{prefix_dims[0]}d vs {full_dim}d)",
        "",
        *_table(
            ["method", *METRICS.values()],
            [
                [s.method, *(_metric_cell(key, *s.metrics[key]) for key in METRICS)]
                for s in summaries.values()
            ],
        ),
        "",
        "## Paired comparisons (a − b over shared seeds; p Holm-adjusted per metric across pairs)",
        "",
    ]
    if comparisons:
        lines += _table(
            ["a", "b", "metric", "n", "mean diff", "t", "p", "p (Holm)", "Cohen's d"],
            [
                [
                    c.a,
                    c.b,
                    METRICS[c.metric],
                    str(c.result.n),
                    f"{c.result.mean_diff:+.3f}",
                    f"{c.result.t:.2f}",
                    f"{c.result.p:.3g}",
                    f"{c.p_holm:.3g}",
                    f"{c.result.cohens_d:.2f}",
                ]
                for c in comparisons
            ],
        )
    else:
        lines.append("No pair of methods shares two or more seeds.")
    lines += [
        "",
        f"## Mixed workload (coarse queries at {coarse_dim}d on {level_names[0]}, "
        f"fine queries at {full_dim}d on {level_names[-1]})",
        "",
        *_workload_table(summaries, coarse_dim, full_dim),
        "",
    ]
    for crossover in crossovers:
        alpha = crossover["alpha"]
        verdict = "never" if alpha is None else f"for α ≥ {alpha:.2f}"
        lines.append(
            f"- {crossover['adaptive']} adaptive ({coarse_dim}/{full_dim}d) beats "
            f"{crossover['fixed']} at {full_dim}d: {verdict}"
        )
    return "\n".join(lines) + "\n"


def _labels_json(hierarchy: LabelHierarchy) -> list[dict[str, Any]]:
    """Each level's labels by id, shown as their paths from the root."""
    return [
        {"level": name, "labels": list(hierarchy.display_names(level))}
        for level, name in enumerate(hierarchy.level_names)
    ]


def _labels_markdown(hierarchy: LabelHierarchy) -> list[str]:
    lines = [
        "",
        f"## Labels (each shown as its path from the root, joined by '{LABEL_PATH_SEPARATOR}')",
        "",
    ]
    for level, name in enumerate(hierarchy.level_names):
        names = hierarchy.display_names(level)
        lines.append(f"- {name} ({len(names)}): {', '.join(names)}")
    return lines


def write_report(
    runs: Sequence[RunResult],
    out_dir: Path,
    level_names: Sequence[str],
    *,
    pairs: Sequence[tuple[str, str]] = (("v5", "mrl"),),
    coarse_dim: int | None = None,
    title: str = "Fractal evaluation",
    hierarchy: LabelHierarchy | None = None,
) -> ReportFiles:
    """Write ``report.json``, ``report.md``, ``accuracy_by_prefix.png`` and ``workload.png``.

    ``level_names`` names the label levels, coarsest first; ``pairs`` lists the ``(a, b)``
    comparisons (pairs naming a method without runs are skipped); ``coarse_dim`` is the prefix the
    adaptive workload policy answers coarse queries with (default: the shortest). With
    ``hierarchy`` (whose levels must be ``level_names``), both files list every level's labels
    by their paths (``LOC / other``). In the JSON, statistics that are not finite (the SD of a
    single seed, t of a zero-variance pair) are null.
    """
    summaries = summarise(runs, coarse_dim=coarse_dim)
    first = runs[0].evaluation
    prefix_dims = first.prefix_dims
    if len(level_names) != first.knn_accuracy.shape[0]:
        raise ValueError(
            f"{len(level_names)} level names for {first.knn_accuracy.shape[0]} label levels"
        )
    if hierarchy is not None and hierarchy.level_names != tuple(level_names):
        raise ValueError(
            f"the hierarchy's levels {hierarchy.level_names} are not {tuple(level_names)}"
        )
    coarse_dim = prefix_dims[0] if coarse_dim is None else coarse_dim
    comparisons = compare(runs, pairs)
    crossovers = _crossovers(summaries, pairs)

    out_dir.mkdir(parents=True, exist_ok=True)
    files = ReportFiles(
        json=out_dir / "report.json",
        markdown=out_dir / "report.md",
        accuracy_plot=out_dir / "accuracy_by_prefix.png",
        workload_plot=out_dir / "workload.png",
    )
    document = {
        "title": title,
        "level_names": list(level_names),
        "prefix_dims": prefix_dims,
        "k": first.k,
        "runs": [
            {"method": run.method, "seed": run.seed, **run.evaluation.to_dict()} for run in runs
        ],
        "methods": {
            s.method: {
                "seeds": s.seeds,
                "knn_accuracy": {"mean": s.knn_accuracy[0], "sd": s.knn_accuracy[1]},
                "recall_at_1": {"mean": s.recall_at_1[0], "sd": s.recall_at_1[1]},
                "metrics": {key: {"mean": m, "sd": sd} for key, (m, sd) in s.metrics.items()},
                "workload_adaptive": {"mean": s.adaptive_workload[0], "sd": s.adaptive_workload[1]},
                "workload_fixed": {"mean": s.fixed_workload[0], "sd": s.fixed_workload[1]},
            }
            for s in summaries.values()
        },
        "workload": {
            "alphas": ALPHAS,
            "coarse_dim": coarse_dim,
            "full_dim": prefix_dims[-1],
            "crossovers": crossovers,
        },
        "comparisons": [
            {"a": c.a, "b": c.b, "metric": c.metric, **c.result.to_dict(), "p_holm": c.p_holm}
            for c in comparisons
        ],
    }
    if hierarchy is not None:
        document["labels"] = _labels_json(hierarchy)
    files.json.write_text(json.dumps(_finite_or_none(document), indent=2, allow_nan=False) + "\n")
    markdown = _markdown(
        title, summaries, comparisons, crossovers, level_names, prefix_dims, coarse_dim, first.k
    )
    if hierarchy is not None:
        markdown += "\n".join(_labels_markdown(hierarchy)) + "\n"
    files.markdown.write_text(markdown)
    plot_accuracy_by_prefix(
        files.accuracy_plot,
        prefix_dims,
        level_names,
        {s.method: s.knn_accuracy for s in summaries.values()},
    )
    plot_workload(
        files.workload_plot,
        ALPHAS,
        {s.method: s.adaptive_workload for s in summaries.values()},
        {s.method: s.fixed_workload for s in summaries.values()},
        coarse_dim=coarse_dim,
        full_dim=prefix_dims[-1],
    )
    return files
