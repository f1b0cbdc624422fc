"""Service settings side by side through the live service: encoder precision, threads and
spinning, the micro-batch wait, uvicorn's HTTP parser and event loop, and the admission limit,
measured on coarse ``/search`` at several concurrencies.

    python -m benchmarks service_settings                      # about 11 minutes
    python -m benchmarks service_settings --int8-bundle runs/clinc150-int8/bundle \
        --index-dir runs/service-settings                      # indexes kept, reused next time
    python -m benchmarks service_settings --smoke --out DIR    # under a minute

Variants, each a ``python -m service`` process (:func:`benchmarks.harness.live_load.
served_corpus`) with the settings named, all others at their defaults:

- ``fp32``: the fp32 bundle, every setting at its default (the baseline of the ratios);
- ``fp32, spin``: ``FRACTAL_ENCODER_SPIN=true``, ONNX Runtime's own default (idle intra-op
  threads spin-wait);
- ``fp32, wait 5 ms``: ``FRACTAL_MAX_WAIT_MS=5``, an idle encoder waits up to 5 ms for its batch
  to fill (the default, 0, encodes at once what is waiting);
- ``fp32, h11 + asyncio``: ``FRACTAL_HTTP=h11``, ``FRACTAL_LOOP=asyncio``, what uvicorn runs
  without its optional ``httptools`` and ``uvloop`` (the defaults, ``auto``, pick those when
  they are installed);
- ``fp32, 1 encoder thread``: ``FRACTAL_ENCODER_THREADS=1`` (the default: one per core), which
  leaves a core to HTTP and search;
- ``fp32, limit concurrency 64``: ``FRACTAL_LIMIT_CONCURRENCY=64``; these concurrencies stay
  below it, so it shows what the admission check itself costs;
- ``int8``: the same bundle with a dynamic int8 ONNX Runtime encoder (``fractal quantize
  --recipe onnxruntime-int8``, the runtime whose settings these variants compare; made here from
  the fp32 bundle unless ``--int8-bundle`` is given);
- ``int8, spin``: the int8 bundle with ``FRACTAL_ENCODER_SPIN=true``.

Several uvicorn workers are not a variant: the runtime (model and index) is loaded before
uvicorn starts, one process per replica, so the service scales with replicas.

Each bundle's corpus (:func:`benchmarks.harness.live_load.corpus`) is ingested once into its own
index folder (temporary, or kept under ``--index-dir`` with the int8 bundle made here and reused
next time). Then each of ``rounds`` rounds starts every variant in turn on its bundle's folder
and runs every concurrency, so that a drift in the shared machine's speed hits every variant
alike. A cell's load comes from ``wrk`` (:func:`benchmarks.harness.live_load.load_cell`: one
thread, ``warmup_seconds`` untimed, then ``seconds_per_cell``), or from the asyncio client
when ``wrk`` is not installed (its figures are lower bounds: it takes a good part of the two
cores); ``--pin yes`` puts the service on one core and the generator on the other. Where the
time went is the service's own histograms over the cell (``/metrics`` read before and after).
A variant's QPS at a concurrency is its answered requests over its seconds, summed over the
rounds; latencies, the service's means and the generator's CPU are the medians of the rounds'.
Loopback only.

Writes ``service_settings[_smoke].{json,md,png}`` under ``--out`` (default
``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import math
import tempfile
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from benchmarks.harness.live_load import (
    WORKLOADS,
    WrkSettings,
    concurrency_panels,
    corpus,
    generator_of,
    label_concurrency_panels,
    load_cell,
    served_corpus,
)
from benchmarks.harness.markdown import bullet_list, bullet_sections, markdown_table
from benchmarks.harness.processes import ServiceProcess
from benchmarks.harness.runner import DEFAULT_BUNDLE, Progress, bundle_folder, option
from bundle import load_bundle
from client import FractalClient
from training.data.registry import load_dataset

FP32, INT8 = "fp32", "int8"
WORKLOAD = next(w for w in WORKLOADS if w.name == "coarse")


@dataclass(frozen=True)
class Variant:
    """A service process: which bundle it serves and the settings that differ from defaults."""

    name: str
    bundle: str
    settings: tuple[tuple[str, str], ...] = ()


VARIANTS = (
    Variant("fp32", FP32),
    Variant("fp32, spin", FP32, (("encoder_spin", "true"),)),
    Variant("fp32, wait 5 ms", FP32, (("max_wait_ms", "5"),)),
    Variant("fp32, h11 + asyncio", FP32, (("http", "h11"), ("loop", "asyncio"))),
    Variant("fp32, 1 encoder thread", FP32, (("encoder_threads", "1"),)),
    Variant("fp32, limit concurrency 64", FP32, (("limit_concurrency", "64"),)),
    Variant("int8", INT8),
    Variant("int8, spin", INT8, (("encoder_spin", "true"),)),
)
BASELINE = "fp32"


def onnxruntime_int8_bundle(text: str) -> Path:
    """An ``--int8-bundle`` value: a bundle folder whose encoder is an ONNX Runtime int8 twin
    (an OpenVINO twin ignores the spinning that two variants compare)."""
    path = bundle_folder(text)
    quantization = load_bundle(path).quantization
    if quantization is None or quantization.runtime != "onnxruntime":
        made = "not quantised" if quantization is None else f"made for {quantization.runtime}"
        raise argparse.ArgumentTypeError(
            f"{path}: {made}; make one with `fractal quantize --recipe onnxruntime-int8`"
        )
    return path


@dataclass(frozen=True)
class Settings(WrkSettings):
    """Every parameter of a run: the corpus, the service and the load cells
    (:class:`WrkSettings`, with fewer documents, concurrencies and seconds; ``--service``
    settings apply to every variant, under its own), then the rounds and the int8 bundle."""

    rounds: int = 2
    """Every variant runs every concurrency once per round."""
    check_train: int = 1200
    check_test: int = 300
    """CLINC-150 training and test texts that check the int8 bundle made here: its cosines to
    fp32 and k-NN cost are recorded, the cost not bounded (300 test texts measure it to about a
    point: this benchmark is about speed)."""
    documents: int = 20_000
    concurrency: tuple[int, ...] = (1, 8, 32)
    requests_per_cell: int = 600
    seconds_per_cell: float = option(8.0, "time of a cell, after warmup_seconds untimed")
    warmup_requests: int = 24
    bundle: Path = option(DEFAULT_BUNDLE, "the fp32 bundle", parse=bundle_folder)
    int8_bundle: Path | None = option(
        None,
        "its ONNX Runtime int8 twin (default: made here, `fractal quantize --recipe "
        "onnxruntime-int8`)",
        parse=onnxruntime_int8_bundle,
    )
    index_dir: Path | None = option(
        None,
        "keep each bundle's index (and the int8 bundle made here) in this folder and reuse "
        "them next time (default: a temporary one)",
    )


SMOKE = Settings(
    documents=300,
    queries=40,
    concurrency=(1, 4),
    requests_per_cell=12,
    seconds_per_cell=1.0,
    warmup_seconds=1.0,
    warmup_requests=2,
    rounds=1,
    check_train=80,
    check_test=20,
)


def int8_bundle(fp32: Path, target: Path, settings: Settings) -> None:
    """Write the ONNX Runtime int8 twin of ``fp32`` to ``target`` (``fractal quantize --recipe
    onnxruntime-int8``: the variants compare ONNX Runtime's settings, spinning among them)."""
    from training.quantize import RECIPES, quantize_bundle

    data = load_dataset("clinc150", max_train=settings.check_train, max_test=settings.check_test)
    quantize_bundle(
        fp32, target, data, max_knn_cost_points=math.inf, recipe=RECIPES["onnxruntime-int8"]
    )


def _median(values: Iterable[float | None]) -> float:
    """The median, a missing value read as NaN."""
    return float(np.median([np.nan if value is None else value for value in values]))


def summarise(rows: list[dict]) -> list[dict]:
    """One row per variant and concurrency, pooled over the rounds (see the module docstring)."""
    summary = []
    keys = dict.fromkeys((row["variant"], row["concurrency"]) for row in rows)
    for variant, concurrency in keys:
        cells = [r for r in rows if (r["variant"], r["concurrency"]) == (variant, concurrency)]
        summary.append(
            {
                "variant": variant,
                "concurrency": concurrency,
                "requests": sum(cell["requests"] for cell in cells),
                "failed": sum(cell["failed"] for cell in cells),
                "qps": sum(cell["ok"] for cell in cells) / sum(cell["seconds"] for cell in cells),
                **{
                    key: _median(cell[key] for cell in cells)
                    for key in ("p50_ms", "p99_ms", "client_cpu_percent")
                },
                **{
                    key: _median(cell["server"][key] for cell in cells)
                    for key in ("encode_call_ms", "texts_per_encode_call", "search_ms")
                },
            }
        )
    baseline = {row["concurrency"]: row for row in summary if row["variant"] == BASELINE}
    for row in summary:
        base = baseline[row["concurrency"]]
        row["qps_vs_baseline"] = row["qps"] / base["qps"]
        row["p50_vs_baseline"] = row["p50_ms"] / base["p50_ms"]
    return summary


def markdown(report: dict) -> str:
    table = markdown_table(
        [
            "variant",
            "concurrency",
            "requests",
            "failed",
            "QPS",
            f"QPS / {BASELINE}",
            "p50 ms",
            f"p50 / {BASELINE}",
            "p99 ms",
            "encode ms",
            "texts / call",
            "search ms",
            "client CPU %",
        ],
        [
            [
                row["variant"],
                row["concurrency"],
                row["requests"],
                row["failed"],
                f"{row['qps']:.1f}",
                f"{row['qps_vs_baseline']:.2f}",
                f"{row['p50_ms']:.1f}",
                f"{row['p50_vs_baseline']:.2f}",
                f"{row['p99_ms']:.1f}",
                f"{row['encode_call_ms']:.2f}",
                f"{row['texts_per_encode_call']:.1f}",
                f"{row['search_ms']:.3f}",
                f"{row['client_cpu_percent']:.0f}",
            ]
            for row in report["summary"]
        ],
    )
    generator = report["generator"]
    load = (
        "`wrk` (one thread, a compiled generator)"
        if generator == "wrk"
        else "the asyncio client (it takes a good part of the service's cores: lower bounds)"
    )
    placement = (
        "the service on one core, the generator on the other"
        if report["settings"]["pin"]
        else "the generator shares the machine's cores with the service"
    )
    quantization = report["bundles"][INT8]["quantization"]
    return "\n".join(
        [
            "# Service settings side by side",
            "",
            f"Command: `{report['command']}`. Coarse `/search` (64-d HNSW, k 10) through the live "
            f"service on loopback, load from {load}; {placement}. `encode ms` (per encoder call: "
            "tokenise + ONNX, without the micro-batch wait), `texts / call` and `search ms` are "
            "the service's own means over the cell (its histograms, `/metrics` read before and "
            "after); `client CPU %` is the generator's CPU time over the cell's wall time "
            "(100 = one of the cores).",
            "",
            "## Results",
            "",
            table,
            "",
            "## Bundles",
            "",
            bullet_list({name: bundle["path"] for name, bundle in report["bundles"].items()}),
            f"- int8 cosine to fp32: {quantization['cosine_to_fp32']}",
            "",
            "## Variants",
            "",
            bullet_list(
                {
                    v["name"]: f"{v['bundle']} bundle, {dict(v['settings'])}"
                    for v in report["variants"]
                }
            ),
            "",
            *bullet_sections(
                {key.title(): report[key] for key in ("corpus", "settings", "machine")}
            ),
        ]
    )


def plot(report: dict, path: Path) -> None:
    figure, left, right = concurrency_panels()
    for variant in VARIANTS:
        rows = [row for row in report["summary"] if row["variant"] == variant.name]
        x = [row["concurrency"] for row in rows]
        style = "-" if variant.bundle == INT8 else "--"
        left.plot(x, [row["qps"] for row in rows], style, marker="o", label=variant.name)
        right.plot(x, [row["p50_ms"] for row in rows], style, marker="o", label=variant.name)
    label_concurrency_panels(left, right, "p50 latency (ms)")
    left.set_title(
        f"Coarse search ({report['generator']}), {report['corpus']['documents']:,} documents"
    )
    right.set_yscale("log")
    right.set_title("Median latency")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def run(settings: Settings, progress: Progress) -> dict:
    generator = generator_of(settings)
    texts, sources, queries, description = corpus(settings)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        kept = settings.index_dir or work
        kept.mkdir(parents=True, exist_ok=True)
        int8 = settings.int8_bundle or kept / "bundle-int8"
        if not (int8 / "manifest.json").is_file():
            progress("quantising the encoder")
            int8_bundle(settings.bundle, int8, settings)
        bundles = {FP32: settings.bundle, INT8: int8}
        described = {
            name: {
                "path": str(path),
                "quantization": load_bundle(path).to_json().get("quantization"),
            }
            for name, path in bundles.items()
        }

        def serve(variant: Variant) -> AbstractContextManager[ServiceProcess]:
            """``variant``'s service on its bundle's index folder under ``kept`` (the corpus
            ingested when the folder is empty), its settings over ``--service``'s."""
            served = replace(
                settings,
                bundle=bundles[variant.bundle],
                index_dir=kept / f"index-{variant.bundle}",
                service=settings.service + variant.settings,
            )
            return served_corpus(served, texts, sources, work, progress, snapshot_interval_s=0)

        for name in bundles:
            progress(f"the {name} bundle's index")
            with serve(Variant(name, name)):
                pass
        infos = {}
        for round_number in range(settings.rounds):
            for position, variant in enumerate(VARIANTS):
                offset = (round_number * len(VARIANTS) + position) * settings.requests_per_cell
                with serve(variant) as process:
                    with FractalClient(process.base_url, timeout_s=60) as client:
                        infos[variant.name] = client.info()
                    for concurrency in settings.concurrency:
                        cell = load_cell(
                            process.base_url,
                            WORKLOAD,
                            queries,
                            concurrency,
                            offset,
                            settings,
                            generator,
                        )
                        rows.append(
                            {
                                "variant": variant.name,
                                "round": round_number,
                                "concurrency": concurrency,
                                **cell,
                            }
                        )
                        progress(
                            f"round {round_number + 1}: {variant.name:<26} c={concurrency:<3} "
                            f"{cell['qps']:7.1f} QPS  failed {cell['failed']}"
                        )
    return {
        "corpus": description,
        "generator": generator,
        "settings": asdict(settings),
        "bundles": described,
        "variants": [
            {**asdict(v), "encoder": infos[v.name]["encoder"], "limits": infos[v.name]["limits"]}
            for v in VARIANTS
        ],
        "rows": rows,
        "summary": summarise(rows),
        "targets": [],
    }
