"""The encoder's call shapes: each call at its own exact shape, against the few shapes of
:mod:`encoding.shape_buckets`, on OpenVINO (the int8 twin) and on ONNX Runtime (the fp32
bundle), in process.

    python -m benchmarks encoder_shapes            # about 3 minutes on 2 cores
    python -m benchmarks encoder_shapes --smoke --bundle B --fp32-bundle B --out DIR

The calls are what an encoder queue sends: ``calls`` batches of CLINC-150 test utterances, each
of a number of texts drawn uniformly from 1 to ``max_rows``, taken in turn from the test split.
Each cell (runtime, threads, ``max_rows``) runs the same calls at their exact shape (padded to
their longest text, their own row count) and at the bucketed shape, twice each, alternated
(exact, bucketed, exact, bucketed), after one untimed pass of each; a cell's figure is the
better of its two passes. CPU is this process's (every thread), per text; texts a second are
wall time. Both shapes give the same vectors: the largest difference between them over one call
of every cell is reported beside.

Writes ``encoder_shapes.{json,md,png}`` (``_smoke`` in smoke runs) under ``--out``.
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.harness.markdown import markdown_table, targets_table
from benchmarks.harness.runner import DEFAULT_BUNDLE, Progress, option
from benchmarks.harness.search_data import clinc_test_texts
from bundle import load_bundle
from encoding import TokenIds
from encoding.encoder import OnnxEncoder
from encoding.shape_buckets import bucketed_shape
from training.data.registry import data_dir

SHAPES = ("exact", "bucketed")


def _cpu_seconds() -> float:
    """This process's CPU seconds, to the microsecond (``/proc``'s ticks are 10 ms: too coarse
    for a smoke run's passes of a few milliseconds)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class Settings:
    """Every parameter of a run."""

    bundle: Path = option(
        DEFAULT_BUNDLE.with_name("bundle-int8"), "bundle run on OpenVINO (the int8 twin)"
    )
    fp32_bundle: Path = option(DEFAULT_BUNDLE, "bundle run on ONNX Runtime (the fp32 bundle)")
    threads: tuple[int, ...] = option((1, 2), "comma-separated encoder thread counts")
    max_rows: tuple[int, ...] = option((1, 8, 32), "comma-separated largest texts per call")
    calls: int = option(120, "calls per pass")
    seed: int = option(0, "the draw of the calls' sizes")


SMOKE = Settings(threads=(1,), max_rows=(1, 8), calls=20)


def _calls(sequences: list[TokenIds], max_rows: int, count: int, seed: int) -> list[list[TokenIds]]:
    """``count`` calls of 1 to ``max_rows`` sequences each, taken in turn."""
    sizes = np.random.default_rng(seed).integers(1, max_rows + 1, count)
    calls, start = [], 0
    for size in sizes:
        if start + size > len(sequences):
            start = 0
        calls.append(sequences[start : start + size])
        start += int(size)
    return calls


def _shape(encoder: OnnxEncoder, call: list[TokenIds], shape: str) -> tuple[int, int]:
    longest = max(len(ids) for ids in call)
    if shape == "exact":
        return len(call), longest
    return bucketed_shape(len(call), longest, encoder.max_tokens)


def _pass(encoder: OnnxEncoder, calls: list[list[TokenIds]], shape: str) -> tuple[float, float]:
    """``(texts a second, CPU ms a text)`` of one pass over the calls."""
    texts = sum(len(call) for call in calls)
    cpu, started = _cpu_seconds(), time.perf_counter()
    for call in calls:
        encoder.run_padded(call, _shape(encoder, call, shape))
    wall = time.perf_counter() - started
    return texts / wall, 1000 * (_cpu_seconds() - cpu) / texts


def _cell(encoder: OnnxEncoder, calls: list[list[TokenIds]]) -> dict:
    for shape in SHAPES:
        _pass(encoder, calls, shape)  # untimed
    passes: dict[str, list[tuple[float, float]]] = {shape: [] for shape in SHAPES}
    for _ in range(2):
        for shape in SHAPES:
            passes[shape].append(_pass(encoder, calls, shape))
    cell: dict = {}
    for shape, measured in passes.items():
        best = min(measured, key=lambda pair: pair[1])
        cell[shape] = {"texts_per_s": round(best[0], 1), "cpu_ms_per_text": round(best[1], 3)}
    exact, bucketed = cell["exact"]["cpu_ms_per_text"], cell["bucketed"]["cpu_ms_per_text"]
    cell["cpu_ratio"] = round(bucketed / exact, 3)
    sample = max(calls, key=len)
    difference = np.abs(
        encoder.run_padded(sample, _shape(encoder, sample, "exact"))
        - encoder.run_padded(sample, _shape(encoder, sample, "bucketed"))
    )
    cell["max_abs_difference"] = float(difference.max())
    return cell


def run(settings: Settings, progress: Progress) -> dict:
    texts = clinc_test_texts(data_dir())
    bundles = {"openvino": settings.bundle, "onnxruntime": settings.fp32_bundle}
    rows = []
    for runtime, bundle in bundles.items():
        manifest = load_bundle(bundle)
        for threads in settings.threads:
            encoder = OnnxEncoder(bundle, manifest, threads, runtime=runtime)
            sequences = encoder.token_ids(texts)
            for max_rows in settings.max_rows:
                progress(f"{runtime}, {threads} thread(s), 1–{max_rows} texts a call")
                calls = _calls(sequences, max_rows, settings.calls, settings.seed)
                cell = _cell(encoder, calls)
                rows.append(
                    {"runtime": runtime, "bundle": str(bundle), "threads": threads,
                     "max_rows": max_rows, **cell}
                )  # fmt: skip
    lone = [row for row in rows if row["runtime"] == "openvino" and row["max_rows"] == 1]
    worst = max((row["cpu_ratio"] for row in lone), default=float("nan"))
    largest = max(row["max_abs_difference"] for row in rows)
    targets = [
        {
            "target": "OpenVINO: one-text calls at their bucketed shape cost less CPU than at "
            "their exact shape",
            "reached": f"bucketed / exact CPU per text at most {worst:.2f}",
            "met": worst < 1.0,
        },
        {
            "target": "the same vectors at either shape (largest difference ≤ 1e-5)",
            "reached": f"{largest:.2e}",
            "met": largest <= 1e-5,
        },
    ]
    return {
        "settings": {
            "threads": list(settings.threads),
            "max_rows": list(settings.max_rows),
            "calls": settings.calls,
            "seed": settings.seed,
            "texts": "CLINC-150 test utterances, in turn",
        },
        "rows": rows,
        "targets": targets,
    }


def markdown(report: dict) -> str:
    rows = [
        [
            row["runtime"],
            row["threads"],
            f"1–{row['max_rows']}",
            f"{row['exact']['texts_per_s']:.0f}",
            f"{row['bucketed']['texts_per_s']:.0f}",
            f"{row['exact']['cpu_ms_per_text']:.3f}",
            f"{row['bucketed']['cpu_ms_per_text']:.3f}",
            f"{row['cpu_ratio']:.2f}",
            f"{row['max_abs_difference']:.1e}",
        ]
        for row in report["rows"]
    ]
    table = markdown_table(
        ["runtime", "threads", "texts a call", "texts/s exact", "texts/s bucketed",
         "CPU ms/text exact", "CPU ms/text bucketed", "bucketed / exact CPU", "max |Δ|"],
        rows,
    )  # fmt: skip
    return (
        "\n\n".join(
            [
                "# The encoder's call shapes",
                f"Command: `{report['command']}`. In process; each cell the better of two "
                f"alternated passes of {report['settings']['calls']} calls per shape.",
                "## Targets",
                targets_table(report["targets"]),
                "## Every cell",
                table,
            ]
        )
        + "\n"
    )


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rows"]
    labels = [f"{r['runtime']}\n{r['threads']}t, 1–{r['max_rows']}" for r in rows]
    positions = np.arange(len(rows))
    figure, axes = plt.subplots(figsize=(max(6, 1.1 * len(rows)), 4))
    for offset, shape in ((-0.2, "exact"), (0.2, "bucketed")):
        axes.bar(positions + offset, [r[shape]["cpu_ms_per_text"] for r in rows], 0.4, label=shape)
    axes.set_xticks(positions, labels, fontsize=7)
    axes.set_ylabel("CPU ms per text")
    axes.set_title("Encoder calls at their exact shape and at bucketed shapes")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
