"""Service settings side by side through the live service: encoder precision, ONNX Runtime
thread spinning and the micro-batch wait, measured on coarse ``/search`` at several concurrencies.

    python -m benchmarks service_settings                      # about 15 minutes
    python -m benchmarks service_settings --smoke --out DIR    # well under a minute

Variants, each a ``python -m service`` process (:func:`support.processes.live_service`) with the
settings named, all others at their defaults:

- ``fp32``: the fp32 bundle, every setting at its default (the baseline of the ratios);
- ``fp32, spin``: ``FRACTAL_ENCODER_SPIN=true``, ONNX Runtime's own default (idle intra-op
  threads spin-wait);
- ``fp32, wait 5 ms``: ``FRACTAL_MAX_WAIT_MS=5``, an idle encoder waits up to 5 ms for its batch
  to fill (the default, 0, encodes at once what is waiting);
- ``int8``: the same bundle with a dynamic int8 encoder (``fractal quantize``; made here from
  the fp32 bundle unless ``--int8-bundle`` is given);
- ``int8, spin``: the int8 bundle with ``FRACTAL_ENCODER_SPIN=true``.

Each bundle's corpus (:func:`benchmarks.harness.live_load.corpus`) is ingested once into its own
index folder. Then each of ``rounds`` rounds starts every variant in turn on its bundle's folder
and runs every concurrency (:func:`benchmarks.harness.live_load.run_cell`), so that a drift in
the shared machine's speed hits every variant alike. A variant's QPS at a concurrency is its
answered requests over its seconds, summed over the rounds; p50 and p99 are the medians of the
rounds' percentiles. Loopback only; the client shares the 2 cores with the service.

Writes ``service_settings[_smoke].{json,md,png}`` under ``--out`` (default
``benchmarks/results``).
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import numpy as np

from benchmarks.harness.live_load import (
    WORKLOADS,
    LoadSettings,
    concurrency_panels,
    corpus,
    ingest,
    label_concurrency_panels,
    measure_cell,
)
from benchmarks.harness.markdown import bullet_list, bullet_sections, markdown_table
from benchmarks.harness.runner import DEFAULT_BUNDLE, Progress, bundle_folder, option
from bundle import load_bundle
from support.client import FractalClient
from support.processes import live_service

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
    Variant("int8", INT8),
    Variant("int8, spin", INT8, (("encoder_spin", "true"),)),
)
BASELINE = "fp32"


@dataclass(frozen=True)
class Settings(LoadSettings):
    """Every parameter of a run: the corpus and load cells (:class:`LoadSettings`, with fewer
    documents, concurrencies and requests), then the rounds and the int8 bundle."""

    rounds: int = 2
    """Every variant runs every concurrency once per round."""
    check_texts: int = 300
    """Texts whose fp32 and int8 vectors are compared when the int8 bundle is made here."""
    documents: int = 20_000
    concurrency: tuple[int, ...] = (1, 8, 32)
    requests_per_cell: int = 600
    seconds_per_cell: float = 12.0
    warmup_requests: int = 24
    bundle: Path = option(DEFAULT_BUNDLE, "the fp32 bundle", parse=bundle_folder)
    int8_bundle: Path | None = option(
        None, "its int8 twin (default: made here, `fractal quantize`'s recipe)", parse=bundle_folder
    )


SMOKE = Settings(
    documents=300, queries=40, concurrency=(1, 4), requests_per_cell=12, seconds_per_cell=5.0,
    warmup_requests=2, rounds=1, check_texts=20,
)


def int8_bundle(fp32: Path, work: Path, texts: list[str]) -> Path:
    """The int8 twin of ``fp32`` under ``work`` (``fractal quantize``'s recipe)."""
    from training.quantize import quantize_bundle

    target = work / "bundle-int8"
    quantize_bundle(fp32, target, texts)
    return target


async def _cells(base_url: str, queries: list[str], settings: Settings, offset: int) -> list:
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
        return [
            await measure_cell(client, WORKLOAD, queries, concurrency, offset, settings)
            for concurrency in settings.concurrency
        ]


def summarise(rows: list[dict]) -> list[dict]:
    """One row per variant and concurrency, pooled over the rounds (see the module docstring)."""
    summary = []
    keys = dict.fromkeys((row["variant"], row["concurrency"]) for row in rows)
    for variant, concurrency in keys:
        cells = [r for r in rows if (r["variant"], r["concurrency"]) == (variant, concurrency)]
        stages = [cell.get("server_median_ms", {}) for cell in cells]
        summary.append(
            {
                "variant": variant,
                "concurrency": concurrency,
                "requests": sum(cell["requests"] for cell in cells),
                "failed": sum(cell["failed"] for cell in cells),
                "qps": sum(cell["ok"] for cell in cells) / sum(cell["seconds"] for cell in cells),
                "p50_ms": float(np.median([cell["p50_ms"] for cell in cells])),
                "p99_ms": float(np.median([cell["p99_ms"] for cell in cells])),
                "encode_ms": float(np.median([s.get("encode", np.nan) for s in stages])),
                "search_ms": float(np.median([s.get("search", np.nan) for s in stages])),
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
            "variant", "concurrency", "requests", "failed", "QPS", f"QPS / {BASELINE}",
            "p50 ms", f"p50 / {BASELINE}", "p99 ms", "encode ms", "search ms",
        ],
        [
            [
                row["variant"], row["concurrency"], row["requests"], row["failed"],
                f"{row['qps']:.1f}", f"{row['qps_vs_baseline']:.2f}", f"{row['p50_ms']:.1f}",
                f"{row['p50_vs_baseline']:.2f}", f"{row['p99_ms']:.1f}",
                f"{row['encode_ms']:.2f}", f"{row['search_ms']:.3f}",
            ]
            for row in report["summary"]
        ],
    )
    quantization = report["bundles"][INT8]["quantization"]
    return "\n".join(
        [
            "# Service settings side by side",
            "",
            f"Command: `{report['command']}`. Coarse `/search` (64-d HNSW, k 10) through the live "
            "service on loopback; the client shares the machine's cores. `encode ms` and "
            "`search ms` are the service's own medians (`timings_ms`; encode includes the "
            "micro-batch wait).",
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
            bullet_list({v["name"]: f"{v['bundle']} bundle, {dict(v['settings'])}"
                         for v in report["variants"]}),
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
    left.set_title(f"Coarse search, {report['corpus']['documents']:,} documents")
    right.set_yscale("log")
    right.set_title("Median latency")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def run(settings: Settings, progress: Progress) -> dict:
    texts, sources, queries, description = corpus(settings)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        int8 = settings.int8_bundle
        if int8 is None:
            progress("quantising the encoder")
            int8 = int8_bundle(settings.bundle, work, queries[: settings.check_texts])
        bundles = {FP32: settings.bundle, INT8: int8}
        described = {
            name: {
                "path": str(path),
                "quantization": load_bundle(path).to_json().get("quantization"),
            }
            for name, path in bundles.items()
        }
        log = work / "service.log"
        for name, path in bundles.items():
            progress(f"ingesting {len(texts):,} documents with the {name} bundle")
            with live_service(path, work / f"index-{name}", log, snapshot_interval_s=0) as url:
                ingest(
                    url, texts, sources, settings.ingest_batch, settings.ingest_clients,
                    progress.enabled,
                )
        infos = {}
        for round_number in range(settings.rounds):
            for position, variant in enumerate(VARIANTS):
                progress(f"round {round_number + 1}: {variant.name}")
                offset = (round_number * len(VARIANTS) + position) * settings.requests_per_cell
                with live_service(
                    bundles[variant.bundle], work / f"index-{variant.bundle}", log,
                    snapshot_interval_s=0, **dict(variant.settings),
                ) as url:
                    with FractalClient(url, timeout_s=60) as client:
                        infos[variant.name] = client.info()
                    for row in asyncio.run(_cells(url, queries, settings, offset)):
                        rows.append({"variant": variant.name, "round": round_number, **row})
    return {
        "corpus": description,
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
