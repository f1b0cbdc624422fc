"""HTTP load test of the live service: QPS and p50/p90/p99 latency at several concurrencies.

    python -m benchmarks http_load --index-dir runs/http-load       # 100,000 documents, kept
    python -m benchmarks http_load --bundle runs/clinc150-int8/bundle --index-dir \
        runs/http-load-int8 --tag int8 --target-coarse-qps 700     # the int8 twin
    python -m benchmarks http_load --smoke --bundle B --out DIR     # seconds

Starts ``python -m service`` on 127.0.0.1 (:func:`benchmarks.harness.live_load.served_corpus`),
ingests the corpus through ``POST /documents`` unless ``--index-dir`` already holds it, then
drives it with ``wrk`` (:func:`benchmarks.harness.live_load.load_cell`, one thread: a compiled
generator, so that the client does not take the service's cores) at ``c`` open connections
(``c`` = 1, 8, 32, 64), each sending its next request as soon as the last one is answered, for
``seconds_per_cell`` seconds after ``warmup_seconds`` untimed. Without ``wrk`` (or with
``--generator python``) the asyncio client drives it instead: it takes a good part of the two
cores, so its figures are lower bounds. ``--pin yes`` puts the service on one core and wrk on
the other.

Workloads, one query text per request, cycling through the held-out queries:

- ``embed``: ``POST /embed`` (every prefix of the bundle);
- ``openai``: ``POST /v1/embeddings`` (the full dimension, the OpenAI clients' request);
- ``coarse``: ``GET /search`` at the coarse prefix (64-d) on the HNSW index;
- ``fine``: ``GET /search`` at the fine dimension (256-d) on the HNSW index;
- ``c2f``: ``GET /search`` with ``rerank=c2f``: an HNSW shortlist of ``k × c2f_factor`` at the
  bundle's shortlist prefix (64-d for a bundle without a measured one), re-ranked exactly at
  256-d.

Where the time goes, per cell, from the service's own histograms (``/metrics`` read before and
after the cell): the mean index-search time of a query, the mean time of an encoder call and the
mean texts per call (how much the encoder queue batched). Recall@10 of each search workload
against the exact index at the same dimension (fine for C2F) is measured in the same run, over
``recall_queries`` queries, so that speeds are read beside recall.

CPU per request: the service process's CPU time (all its threads, from ``/proc``) over each
wrk cell's timed part, over the requests it answered. A search encodes one text, as an
``openai`` request does, so a search workload's CPU beyond ``openai``'s at the same
concurrency is what the search path costs: the index walk, and the plumbing around it.

Service overhead: after the service has stopped, the bundle's encoder is timed in this process
(:func:`benchmarks.harness.live_load.encoder_rate`: batches of ``encoder_batch`` texts, the
service's encoder threads, nothing else running); a workload's *service overhead ratio* is its
QPS at ``overhead_concurrency`` connections over those texts a second (1.0: the service adds
nothing to the encoder; each request encodes one text).

Corpus and queries: :func:`benchmarks.harness.live_load.corpus` (the data folder's sentences
topped up with composed ones; CLINC-150 test utterances held out as queries).

Writes ``http_load[_TAG][_smoke].{json,md,png}`` under ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from benchmarks.harness import embedding_servers
from benchmarks.harness.embedding_servers import EmbeddingServerSettings, side_by_side
from benchmarks.harness.live_load import (
    WORKLOADS,
    Workload,
    concurrency_panels,
    corpus,
    encoder_rate,
    generator_of,
    label_concurrency_panels,
    load_cell,
    openai_workload,
    served_corpus,
)
from benchmarks.harness.markdown import bullet_list, markdown_table, targets_table
from benchmarks.harness.processes import ServiceProcess
from benchmarks.harness.runner import Progress, option
from client import FractalClient


@dataclass(frozen=True)
class Settings(EmbeddingServerSettings):
    """Every parameter of a run: the corpus, the service and the load cells
    (:class:`WrkSettings`), the embedding servers side by side
    (:class:`EmbeddingServerSettings`), then these; the service's other settings are its
    defaults."""

    recall_queries: int = 500
    c2f_factor: int = 4
    """The service's C2F shortlist factor (``FRACTAL_C2F_FACTOR``)."""
    encoder_batch: int = 32
    encoder_seconds: float = 10.0
    overhead_concurrency: int = 32
    target_coarse_qps: float = option(400.0, "coarse /search QPS target (with p99 ≤ 50 ms)")
    target_p99_ms: float = 50.0
    target_fine_qps: float = 150.0
    target_overhead: float = 0.7
    target_search_cpu_ms: float = 0.4
    """Coarse ``/search`` CPU beyond an ``openai`` request at ``overhead_concurrency``."""
    target_openai_qps: float = 1300.0
    """``openai`` requests a second at ``overhead_concurrency``."""
    tag: str = option("", "added to the result file names")


SMOKE = Settings(
    documents=400,
    queries=60,
    concurrency=(1, 4),
    requests_per_cell=24,
    seconds_per_cell=1.0,
    warmup_seconds=1.0,
    warmup_requests=2,
    recall_queries=20,
    encoder_seconds=1.0,
    embedding_cells=("1x1", "4x2"),
    infinity=False,
)


EXACT_TRUTH = {"coarse": "coarse", "fine": "fine", "c2f": "fine"}
"""The granularity of the exact search each search workload's recall is measured against."""
OVERHEAD_WORKLOADS = ("embed", "coarse")
SEARCH_WORKLOADS = ("coarse", "fine", "c2f")


def results_name(settings: Settings) -> str:
    return "http_load" + (f"_{settings.tag}" if settings.tag else "")


# -- measuring ---------------------------------------------------------------------------------


def recall(client: FractalClient, queries: Sequence[str], settings: Settings) -> dict[str, float]:
    """Recall@10 of each search workload against exact search at its truth's granularity."""

    def hit_ids(**options: str) -> list[set[str]]:
        results = client.search_batch(queries, batch_size=64, k=settings.k, **options)
        return [set(result.ids) for result in results]

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


def load(
    process: ServiceProcess,
    workloads: Sequence[Workload],
    queries: Sequence[str],
    settings: Settings,
    generator: str,
    progress: Progress,
) -> list[dict]:
    """Every workload at every concurrency; the workloads of one concurrency run back to back."""
    rows: list[dict] = []
    for concurrency in settings.concurrency:
        for workload in workloads:
            offset = len(rows) * settings.requests_per_cell
            cell = load_cell(
                process.base_url,
                workload,
                queries,
                concurrency,
                offset,
                settings,
                generator,
                process.process.pid,
            )
            row = {"workload": workload.name, "concurrency": concurrency, **cell}
            rows.append(row)
            progress(
                f"{workload.name:>6} c={concurrency:<3} {row['qps']:7.1f} QPS  "
                f"p50 {_f(row['p50_ms'])}  p99 {_f(row['p99_ms'])} ms  "
                f"failed {row['failed']}  "
                f"service CPU {_f(row.get('service_cpu_ms'), 3)} ms/request  "
                f"{generator} CPU {row['client_cpu_percent']:.0f}%"
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


def overhead(rows: Sequence[dict], texts_per_second: float, settings: Settings) -> dict:
    """Each workload's QPS at the highest concurrency up to ``overhead_concurrency`` over the
    encoder's texts a second."""
    concurrency = max(c for c in settings.concurrency if c <= settings.overhead_concurrency)
    return {
        "concurrency": concurrency,
        "encoder_texts_per_second": texts_per_second,
        "encoder_batch": settings.encoder_batch,
        "ratio": {
            row["workload"]: row["qps"] / texts_per_second
            for row in rows
            if row["concurrency"] == concurrency
        },
    }


def targets(rows: Sequence[dict], service_overhead: dict, settings: Settings) -> list[dict]:
    """The QPS targets, each read from the best cell that qualifies for it, and the service
    overhead ratios."""
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
    found = [
        {
            "target": target,
            "reached": "no qualifying cell" if cell is None else round(cell["qps"], 1),
            "at_concurrency": None if cell is None else cell["concurrency"],
            "met": cell is not None and cell["qps"] >= qps,
        }
        for target, cell, qps in wanted
    ]
    concurrency = service_overhead["concurrency"]
    openai = next(
        (r for r in rows if r["workload"] == "openai" and r["concurrency"] == concurrency), None
    )
    found.append(
        {
            "target": f"/v1/embeddings, one text, ≥ {settings.target_openai_qps:.0f} req/s at "
            f"c={concurrency}",
            "reached": "no cell" if openai is None else round(openai["qps"], 1),
            "at_concurrency": concurrency,
            "met": openai is not None and openai["qps"] >= settings.target_openai_qps,
        }
    )
    at = next((e for e in search_cpu(rows) if e["concurrency"] == concurrency), None)
    beyond = None if at is None else at["beyond_openai_ms"]["coarse"]
    found.append(
        {
            "target": f"coarse /search CPU beyond a /v1/embeddings request at c={concurrency} "
            f"≤ {settings.target_search_cpu_ms} ms (the index walk included)",
            "reached": "no CPU figure" if beyond is None else round(beyond, 3),
            "at_concurrency": concurrency,
            "met": beyond is not None and beyond <= settings.target_search_cpu_ms,
        }
    )
    for workload in OVERHEAD_WORKLOADS:
        ratio = service_overhead["ratio"][workload]
        found.append(
            {
                "target": f"{workload}: QPS at c={concurrency} / encoder texts/s at batch "
                f"{settings.encoder_batch} ≥ {settings.target_overhead}",
                "reached": round(ratio, 3),
                "at_concurrency": concurrency,
                "met": ratio >= settings.target_overhead,
            }
        )
    return found


def coarse_vs_fine(rows: Sequence[dict]) -> list[dict]:
    """Per concurrency: coarse, fine and C2F QPS, and the service's mean index-search time."""
    table = []
    for concurrency in sorted({row["concurrency"] for row in rows}):
        cells = {row["workload"]: row for row in rows if row["concurrency"] == concurrency}
        entry: dict = {"concurrency": concurrency}
        for name in ("coarse", "fine", "c2f"):
            entry[f"{name}_qps"] = cells[name]["qps"]
            entry[f"{name}_index_ms"] = cells[name]["server"]["search_ms"]
        entry["qps_coarse_over_fine"] = entry["coarse_qps"] / entry["fine_qps"]
        entry["index_fine_over_coarse"] = (
            entry["fine_index_ms"] / entry["coarse_index_ms"]
            if entry["fine_index_ms"] and entry["coarse_index_ms"]
            else None
        )
        table.append(entry)
    return table


def search_cpu(rows: Sequence[dict]) -> list[dict]:
    """Per concurrency: each workload's service CPU per request, and each search workload's
    beyond an ``openai`` request (None where a cell has no CPU figure)."""
    table = []
    for concurrency in sorted({row["concurrency"] for row in rows}):
        cpu = {
            row["workload"]: row.get("service_cpu_ms")
            for row in rows
            if row["concurrency"] == concurrency
        }
        embedding = cpu.get("openai")
        beyond = {
            name: None if embedding is None or cpu.get(name) is None else cpu[name] - embedding
            for name in SEARCH_WORKLOADS
        }
        table.append({"concurrency": concurrency, "cpu_ms": cpu, "beyond_openai_ms": beyond})
    return table


def _f(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def markdown(report: dict) -> str:
    settings, rows = report["settings"], report["rows"]
    cells = [
        [
            row["workload"],
            row["concurrency"],
            row["requests"],
            row["failed"],
            _f(row["qps"]),
            _f(row["p50_ms"]),
            _f(row["p90_ms"]),
            _f(row["p99_ms"]),
            _f(row["server"]["encode_call_ms"], 2),
            _f(row["server"]["texts_per_encode_call"]),
            _f(row["server"]["search_ms"], 3),
            _f(row.get("service_cpu_ms"), 3),
            f"{row['client_cpu_percent']:.0f}",
        ]
        for row in rows
    ]
    names = list(dict.fromkeys(row["workload"] for row in rows))
    cpu = [
        [e["concurrency"]]
        + [_f(e["cpu_ms"].get(name), 3) for name in names]
        + [_f(e["beyond_openai_ms"][name], 3) for name in SEARCH_WORKLOADS]
        for e in report["search_cpu"]
    ]
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
            _f(e["index_fine_over_coarse"], 2),
        ]
        for e in report["coarse_vs_fine"]
    ]
    service_overhead = report["service_overhead"]
    ratios = [[name, f"{ratio:.3f}"] for name, ratio in service_overhead["ratio"].items()]
    recalls = [[name, f"{value:.3f}"] for name, value in report["recall_at_10"].items()]
    generator = report["generator"]
    return "\n\n".join(
        [
            "# HTTP load test" + (" (smoke run)" if report["smoke"] else ""),
            f"Command: `{report['command']}`. Loopback only; load from `{generator}`"
            + (
                " (one thread, a compiled generator)"
                if generator == "wrk"
                else " (the asyncio client: it takes a good part of the service's cores)"
            )
            + (
                ", pinned: the service on one core, the generator on the other."
                if settings["pin"]
                else ", on the same cores as the service."
            ),
            "## Targets\n\n" + targets_table(report["targets"]),
            "## Service overhead\n\nThe bundle's encoder alone, in the benchmark's process after "
            f"the service stopped: {service_overhead['encoder_texts_per_second']:.1f} texts/s "
            f"in batches of {service_overhead['encoder_batch']} "
            f"({report['service']['encoder']['threads']} threads). Ratio: QPS at "
            f"c={service_overhead['concurrency']} over that (one text per request).\n\n"
            + markdown_table(["workload", "QPS / encoder texts per s"], ratios),
            "## CPU per request\n\nThe service process's CPU milliseconds per answered request "
            "(all its threads, encoder included), and each search workload's beyond a "
            "`/v1/embeddings` request of one text at the same concurrency: the search path's "
            "own cost, index walk included.\n\n"
            + markdown_table(
                ["concurrency", *(f"{name} ms" for name in names)]
                + [f"{name} − openai ms" for name in SEARCH_WORKLOADS],
                cpu,
            ),
            embedding_servers.markdown_section(report["embedding_servers"]),
            "## Recall@10 of each search workload\n\nAgainst the service's exact index at the "
            "same granularity (C2F: against exact fine search), over "
            f"{settings['recall_queries']} queries.\n\n"
            + markdown_table(["workload", "recall@10"], recalls),
            "## Coarse versus fine through the live service\n\nQPS of whole requests, and the "
            "mean time the service spent in the index per query under that load (its "
            "`fractal_search_duration_seconds` histogram over the cell).\n\n"
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
            "## Every cell\n\nQPS counts answers below 400; latency is the generator's, per "
            "request; `encode ms` (per encoder call), `texts / call` and `index ms` are the "
            "service's own means over the cell; `service CPU ms` is the service's CPU per request; "
            "`client CPU %` is the load generator's CPU "
            "time over the cell's wall time (100 = one of the 2 cores).\n\n"
            + markdown_table(
                [
                    "workload",
                    "concurrency",
                    "requests",
                    "failed",
                    "QPS",
                    "p50 ms",
                    "p90 ms",
                    "p99 ms",
                    "encode ms",
                    "texts / call",
                    "index ms",
                    "service CPU ms",
                    "client CPU %",
                ],
                cells,
            ),
            "## Corpus and service\n\n" + bullet_list(report["corpus"] | report["service"]),
            "## Settings\n\n" + bullet_list(settings),
            "## Machine\n\n" + bullet_list(report["machine"]),
        ]
    )


def plot(report: dict, path: Path) -> None:
    figure, left, right = concurrency_panels()
    for name in dict.fromkeys(row["workload"] for row in report["rows"]):
        rows = [row for row in report["rows"] if row["workload"] == name]
        x = [row["concurrency"] for row in rows]
        left.plot(x, [row["qps"] for row in rows], marker="o", label=name)
        right.plot(x, [row["p99_ms"] or np.nan for row in rows], marker="o", label=name)
    settings = report["settings"]
    right.axhline(settings["target_p99_ms"], color="grey", linestyle="--", linewidth=0.8)
    left.axhline(settings["target_coarse_qps"], color="grey", linestyle="--", linewidth=0.8)
    label_concurrency_panels(left, right, "p99 latency (ms)")
    documents = report["corpus"]["documents"]
    left.set_title(f"Throughput ({report['generator']}), {documents:,} documents")
    right.set_title("Tail latency (dashed: target)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def run(settings: Settings, progress: Progress) -> dict:
    generator = generator_of(settings)
    texts, sources, queries, description = corpus(settings)
    service = {
        "index_kinds": "hnsw,exact",
        "c2f_factor": settings.c2f_factor,
        "snapshot_interval_s": 0,
    }
    with tempfile.TemporaryDirectory() as work:
        with (
            served_corpus(settings, texts, sources, Path(work), progress, **service) as process,
            FractalClient(process.base_url, timeout_s=600) as client,
        ):
            setup_seconds = progress.elapsed
            progress("recall of each search workload")
            recalls = recall(client, queries[: settings.recall_queries], settings)
            progress(f"recall@10 {recalls}")
            info = client.info()
            workloads = (*WORKLOADS, openai_workload(info["model"]))
            rows = load(process, workloads, queries, settings, generator, progress)
        progress("embedding servers side by side")
        servers = side_by_side(settings, queries, generator, Path(work), progress)
    threads = info["encoder"]["threads"]
    progress(f"the encoder alone: batches of {settings.encoder_batch}, {threads} threads")
    texts_per_second = encoder_rate(
        settings, threads, queries, settings.encoder_batch, settings.encoder_seconds
    )
    service_overhead = overhead(rows, texts_per_second, settings)
    progress(f"encoder {texts_per_second:.1f} texts/s; overhead ratios {service_overhead['ratio']}")
    service |= dict(settings.service) | {
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
        "generator": generator,
        "settings": asdict(settings),
        "setup_seconds": setup_seconds,
        "recall_at_10": recalls,
        "rows": rows,
        "coarse_vs_fine": coarse_vs_fine(rows),
        "search_cpu": search_cpu(rows),
        "service_overhead": service_overhead,
        "embedding_servers": servers,
        "targets": [
            *targets(rows, service_overhead, settings),
            embedding_servers.target(servers, settings),
        ],
    }
