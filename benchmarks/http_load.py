"""HTTP load test of the live service: QPS and p50/p95/p99 latency at several concurrencies.

    python -m benchmarks http_load                                  # 100,000 documents
    python -m benchmarks http_load --index-dir runs/http-load       # keep the ingested index
    python -m benchmarks http_load --smoke --bundle B --out DIR     # seconds

Starts ``python -m service`` on 127.0.0.1 (:func:`support.processes.live_service`), ingests the
corpus through ``POST /documents`` (:func:`benchmarks.harness.live_load.ingest`), then drives it
from one asyncio client process with ``c`` requests in flight at once (``c`` = 1, 8, 32, 64),
each worker sending its next request as soon as the last one is answered. Loopback only, and
bounded: a cell (one workload at one concurrency) stops after ``requests_per_cell`` requests or
``seconds_per_cell`` seconds, whichever comes first (:func:`benchmarks.harness.live_load.
run_cell`).

Workloads, one query text per request:

- ``embed``: ``POST /embed`` (every prefix of the bundle);
- ``coarse``: ``GET /search`` at the coarse prefix (64-d) on the HNSW index;
- ``fine``: ``GET /search`` at the fine dimension (256-d) on the HNSW index;
- ``c2f``: ``GET /search`` with ``rerank=c2f``: an HNSW shortlist of ``k × c2f_factor`` at the
  bundle's shortlist prefix (64-d for a bundle without a measured one), re-ranked exactly at
  256-d.

Every search reports the service's own timings (``timings_ms``: encode, search, re-rank, fetch);
their medians show where the time goes, and the index-search medians of coarse and fine at
concurrency 1 are the coarse-versus-fine index table measured through the live service. Recall@10
of each search workload against the exact index at the same dimension (fine for C2F) is measured
in the same run, over ``recall_queries`` queries, so that speeds are read beside recall.

Corpus and queries: :func:`benchmarks.harness.live_load.corpus` (the data folder's sentences
topped up with composed ones; CLINC-150 test utterances held out as queries). The client runs on
the same 2 cores as the service; its CPU time per cell is recorded.

Writes ``http_load[_TAG][_smoke].{json,md,png}`` under ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import numpy as np

from benchmarks.harness.live_load import (
    WORKLOADS,
    LoadSettings,
    Workload,
    concurrency_panels,
    corpus,
    ingest,
    label_concurrency_panels,
    measure_cell,
)
from benchmarks.harness.markdown import bullet_list, markdown_table
from benchmarks.harness.runner import Progress, option
from support.client import FractalClient
from support.processes import live_service


@dataclass(frozen=True)
class Settings(LoadSettings):
    """Every parameter of a run: the corpus and load cells (:class:`LoadSettings`), then these;
    the service's other settings are its defaults."""

    recall_queries: int = 500
    c2f_factor: int = 4
    """The service's C2F shortlist factor (``FRACTAL_C2F_FACTOR``)."""
    target_coarse_qps: float = 300.0
    target_p99_ms: float = 50.0
    target_fine_qps: float = 150.0
    index_dir: Path | None = option(
        None, "keep the service's index here and reuse it next time (default: a temporary one)"
    )
    tag: str = option("", "added to the result file names")


SMOKE = Settings(
    documents=400, queries=60, concurrency=(1, 4), requests_per_cell=24, seconds_per_cell=5.0,
    warmup_requests=2, recall_queries=20,
)


EXACT_TRUTH = {"coarse": "coarse", "fine": "fine", "c2f": "fine"}
"""The granularity of the exact search each search workload's recall is measured against."""


def results_name(settings: Settings) -> str:
    return "http_load" + (f"_{settings.tag}" if settings.tag else "")


# -- measuring ---------------------------------------------------------------------------------


def recall(
    client: FractalClient, queries: Sequence[str], settings: Settings
) -> dict[str, float]:
    """Recall@10 of each search workload against exact search at its truth's granularity."""

    def hit_ids(**options: str) -> list[set[str]]:
        results = client.search_batch(queries, batch_size=64, k=settings.k, **options)
        return [{hit["id"] for hit in result["hits"]} for result in results]

    exact = {g: hit_ids(granularity=g, index="exact") for g in ("coarse", "fine")}
    return {
        workload.name: _recall(
            hit_ids(**_options(workload)), exact[EXACT_TRUTH[workload.name]], settings.k
        )
        for workload in WORKLOADS
        if workload.is_search
    }


def _options(workload: Workload) -> dict:
    """A search workload's ``/search`` options (granularity, index, re-rank)."""
    params = workload.arguments("", 0)["params"]
    return {key: params[key] for key in ("granularity", "index", "rerank")}


def _recall(found: list[set[str]], truth: list[set[str]], k: int) -> float:
    return float(np.mean([len(a & t) / k for a, t in zip(found, truth, strict=True)]))


async def load(
    base_url: str, queries: Sequence[str], settings: Settings, progress: Progress
) -> list:
    """Every workload at every concurrency; the workloads of one concurrency run back to back."""
    rows = []
    limits = httpx.Limits(max_connections=max(settings.concurrency))
    async with httpx.AsyncClient(base_url=base_url, timeout=60, limits=limits) as client:
        for concurrency in settings.concurrency:
            for workload in WORKLOADS:
                offset = len(rows) * settings.requests_per_cell
                row = await measure_cell(client, workload, queries, concurrency, offset, settings)
                rows.append(row)
                progress(
                    f"{workload.name:>6} c={concurrency:<3} {row['qps']:7.1f} QPS  "
                    f"p50 {_f(row['p50_ms'])}  p99 {_f(row['p99_ms'])} ms  "
                    f"failed {row['failed']}"
                )
    return rows


# -- reading the rows --------------------------------------------------------------------------


def best_within(rows: Sequence[dict], workload: str, p99_ms: float | None) -> dict | None:
    """The highest-QPS cell of ``workload`` with no failures (and p99 ≤ ``p99_ms`` if given)."""
    fitting = [
        row
        for row in rows
        if row["workload"] == workload
        and row["failed"] == 0
        and row["p99_ms"] is not None
        and (p99_ms is None or row["p99_ms"] <= p99_ms)
    ]
    return max(fitting, key=lambda row: row["qps"]) if fitting else None


def targets(rows: Sequence[dict], settings: Settings) -> list[dict]:
    """The QPS targets, each read from the best cell that qualifies for it."""
    wanted = (
        (
            f"coarse ≥ {settings.target_coarse_qps:.0f} QPS with p99 ≤ "
            f"{settings.target_p99_ms:.0f} ms",
            best_within(rows, "coarse", settings.target_p99_ms),
            settings.target_coarse_qps,
        ),
        (
            f"fine ≥ {settings.target_fine_qps:.0f} QPS",
            best_within(rows, "fine", None),
            settings.target_fine_qps,
        ),
    )
    return [
        {
            "target": target,
            "reached": "no qualifying cell" if cell is None else cell["qps"],
            "at_concurrency": None if cell is None else cell["concurrency"],
            "met": cell is not None and cell["qps"] >= qps,
        }
        for target, cell, qps in wanted
    ]


def coarse_vs_fine(rows: Sequence[dict]) -> list[dict]:
    """Per concurrency: coarse, fine and C2F QPS, and the service's index-search medians."""
    table = []
    for concurrency in sorted({row["concurrency"] for row in rows}):
        cells = {row["workload"]: row for row in rows if row["concurrency"] == concurrency}
        entry: dict = {"concurrency": concurrency}
        for name in ("coarse", "fine", "c2f"):
            cell = cells[name]
            entry[f"{name}_qps"] = cell["qps"]
            stages = cell.get("server_median_ms", {})
            entry[f"{name}_index_ms"] = stages.get("search", 0.0) + stages.get("rerank", 0.0)
        entry["qps_coarse_over_fine"] = entry["coarse_qps"] / entry["fine_qps"]
        entry["index_fine_over_coarse"] = entry["fine_index_ms"] / entry["coarse_index_ms"]
        table.append(entry)
    return table


def _f(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def markdown(report: dict) -> str:
    settings, rows = report["settings"], report["rows"]
    cells = []
    for row in rows:
        stages = row.get("server_median_ms", {})
        cells.append(
            [
                row["workload"],
                row["concurrency"],
                row["requests"],
                row["failed"],
                _f(row["qps"]),
                _f(row["p50_ms"]),
                _f(row["p95_ms"]),
                _f(row["p99_ms"]),
                _f(stages.get("encode"), 2) if stages else "–",
                _f(stages.get("search", 0) + stages.get("rerank", 0), 3) if stages else "–",
                f"{row['client_cpu_share']:.0%}",
            ]
        )
    versus = [
        [
            e["concurrency"],
            _f(e["coarse_qps"]),
            _f(e["fine_qps"]),
            _f(e["c2f_qps"]),
            f"{e['qps_coarse_over_fine']:.2f}",
            _f(e["coarse_index_ms"], 3),
            _f(e["fine_index_ms"], 3),
            _f(e["c2f_index_ms"], 3),
            f"{e['index_fine_over_coarse']:.2f}",
        ]
        for e in report["coarse_vs_fine"]
    ]
    verdicts = [
        [
            t["target"],
            t["reached"] if isinstance(t["reached"], str) else _f(t["reached"]),
            t["at_concurrency"] or "–",
            "yes" if t["met"] else "**no**",
        ]
        for t in report["targets"]
    ]
    recalls = [[name, f"{value:.3f}"] for name, value in report["recall_at_10"].items()]
    return "\n\n".join(
        [
            "# HTTP load test" + (" (smoke run)" if report["smoke"] else ""),
            f"Command: `{report['command']}`. Loopback only; the client and the service share "
            "the machine's cores.",
            "## Machine\n\n" + bullet_list(report["machine"]),
            "## Corpus and service\n\n" + bullet_list(report["corpus"] | report["service"]),
            "## Settings\n\n" + bullet_list(settings),
            "## Targets\n\n"
            + markdown_table(["target", "reached (QPS)", "at concurrency", "met"], verdicts),
            "## Recall@10 of each search workload\n\nAgainst the service's exact index at the "
            "same granularity (C2F: against exact fine search), over "
            f"{settings['recall_queries']} queries.\n\n"
            + markdown_table(["workload", "recall@10"], recalls),
            "## Coarse versus fine through the live service\n\nQPS of whole requests, and the "
            "median time the service spent in the index (search + C2F re-rank, from each "
            "response's `timings_ms`).\n\n"
            + markdown_table(
                [
                    "concurrency",
                    "coarse QPS",
                    "fine QPS",
                    "C2F QPS",
                    "coarse / fine QPS",
                    "coarse index ms",
                    "fine index ms",
                    "C2F index ms",
                    "fine / coarse index time",
                ],
                versus,
            ),
            "## Every cell\n\nLatency is client-side, per request; `encode ms` and `index ms` are "
            "the service's medians; `client CPU` is the load generator's CPU time over the "
            "cell's wall time (of 2 cores).\n\n"
            + markdown_table(
                [
                    "workload",
                    "concurrency",
                    "requests",
                    "failed",
                    "QPS",
                    "p50 ms",
                    "p95 ms",
                    "p99 ms",
                    "encode ms",
                    "index ms",
                    "client CPU",
                ],
                cells,
            ),
        ]
    )


def plot(report: dict, path: Path) -> None:
    figure, left, right = concurrency_panels()
    for workload in WORKLOADS:
        rows = [row for row in report["rows"] if row["workload"] == workload.name]
        x = [row["concurrency"] for row in rows]
        left.plot(x, [row["qps"] for row in rows], marker="o", label=workload.name)
        right.plot(x, [row["p99_ms"] or np.nan for row in rows], marker="o", label=workload.name)
    settings = report["settings"]
    right.axhline(settings["target_p99_ms"], color="grey", linestyle="--", linewidth=0.8)
    left.axhline(settings["target_coarse_qps"], color="grey", linestyle="--", linewidth=0.8)
    label_concurrency_panels(left, right, "p99 latency (ms)")
    documents = report["corpus"]["documents"]
    left.set_title(f"Throughput, {documents:,} documents")
    right.set_title("Tail latency (dashed: target)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def run(settings: Settings, progress: Progress) -> dict:
    texts, sources, queries, description = corpus(settings)
    service = {
        "index_kinds": "hnsw,exact",
        "c2f_factor": settings.c2f_factor,
        "snapshot_interval_s": 0,
    }
    with tempfile.TemporaryDirectory() as work:
        folder = settings.index_dir or Path(work) / "index"
        log = Path(work) / "service.log"
        with (
            live_service(settings.bundle, folder, log, **service) as base_url,
            FractalClient(base_url, timeout_s=600) as client,
        ):
            documents = client.info()["documents"]
            if documents == 0:
                progress(f"ingesting {len(texts):,} documents")
                ingest(
                    base_url, texts, sources, settings.ingest_batch, settings.ingest_clients,
                    progress.enabled,
                )
            elif documents != len(texts):
                raise SystemExit(
                    f"{folder} holds {documents:,} documents, not {len(texts):,}: "
                    "delete it or pass another --index-dir"
                )
            ingest_seconds = progress.elapsed
            progress("recall of each search workload")
            recalls = recall(client, queries[: settings.recall_queries], settings)
            progress(f"recall@10 {recalls}")
            rows = asyncio.run(load(base_url, queries, settings, progress))
            info = client.info()
    service |= {
        "bundle": str(settings.bundle),
        "bundle_objective": info["manifest"]["objective"],
        "encoder": info["encoder"],
        "limits": info["limits"],
        "indexes": [
            {key: index[key] for key in ("kind", "dimension", "vectors", "bytes")}
            for index in info["indexes"]
        ],
    }
    return {
        "corpus": description,
        "service": service,
        "settings": asdict(settings),
        "setup_seconds": ingest_seconds,
        "recall_at_10": recalls,
        "rows": rows,
        "coarse_vs_fine": coarse_vs_fine(rows),
        "targets": targets(rows, settings),
    }
