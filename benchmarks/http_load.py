"""HTTP load test of the live service: QPS and p50/p95/p99 latency at several concurrencies.

    python -m benchmarks.http_load                                  # 100,000 documents
    python -m benchmarks.http_load --index-dir runs/http-load       # keep the ingested index
    python -m benchmarks.http_load --smoke --bundle B --out DIR     # seconds

Starts ``python -m service`` on 127.0.0.1 (:mod:`benchmarks.live_service`), ingests the corpus
through ``POST /documents``, then drives it from one asyncio client process with ``c`` requests
in flight at once (``c`` = 1, 8, 32, 64), each worker sending its next request as soon as the
last one is answered. Loopback only, and bounded: a cell (one workload at one concurrency) stops
after ``requests_per_cell`` requests or ``seconds_per_cell`` seconds, whichever comes first.

Workloads, one query text per request:

- ``embed``: ``POST /embed`` (every prefix of the bundle);
- ``coarse``: ``GET /search`` at the coarse prefix (64-d) on the HNSW index;
- ``fine``: ``GET /search`` at the fine dimension (256-d) on the HNSW index;
- ``c2f``: ``GET /search`` with ``rerank=c2f``: an HNSW shortlist of ``k × c2f_factor`` at 64-d,
  re-ranked exactly at 256-d.

Every search reports the service's own timings (``timings_ms``: encode, search, re-rank, fetch);
their medians show where the time goes, and the index-search medians of coarse and fine at
concurrency 1 are the coarse-versus-fine index table measured through the live service. Recall@10
of each search workload against the exact index at the same dimension (fine for C2F) is measured
in the same run, over ``recall_queries`` queries, so that speeds are read beside recall.

Corpus: every distinct sentence of the data folder (:func:`benchmarks.search_data.real_sentences`)
except the query texts, topped up to ``documents`` with *composed* documents, each two distinct
random sentences of the corpus joined by a space (seeded; all texts distinct). Queries: CLINC-150
in-scope test utterances, held out of the corpus. The client runs on the same 2 cores as the
service; its CPU time per cell is recorded.

Writes ``http_load[_TAG][_smoke].{json,md,png}`` under ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import faiss
import httpx
import matplotlib
import numpy as np
from tqdm import tqdm

from benchmarks.live_service import live_service
from benchmarks.reporting import (
    Progress,
    benchmark_parser,
    bullet_list,
    markdown_table,
    publish,
    record_end_load,
    results_name,
)
from benchmarks.search_data import real_sentences
from benchmarks.search_measure import machine_header
from training.data.registry import data_dir

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the non-interactive backend)

DEFAULT_BUNDLE = Path(__file__).resolve().parents[1] / "runs" / "clinc150-d5" / "bundle"
MS = 1000.0


@dataclass(frozen=True)
class Settings:
    """Every parameter of a run; the service's other settings are its defaults."""

    documents: int = 100_000
    queries: int = 2_000
    concurrency: tuple[int, ...] = (1, 8, 32, 64)
    requests_per_cell: int = 2_000
    seconds_per_cell: float = 15.0
    warmup_requests: int = 32
    recall_queries: int = 500
    k: int = 10
    c2f_factor: int = 4
    ingest_batch: int = 128
    ingest_clients: int = 2
    seed: int = 0
    target_coarse_qps: float = 300.0
    target_p99_ms: float = 50.0
    target_fine_qps: float = 150.0


SMOKE = Settings(
    documents=400,
    queries=60,
    concurrency=(1, 4),
    requests_per_cell=24,
    seconds_per_cell=5.0,
    warmup_requests=2,
    recall_queries=20,
)


@dataclass(frozen=True)
class Workload:
    """One kind of request: its method, path, and how a query text becomes its arguments."""

    name: str
    method: str
    path: str
    arguments: Callable[[str, Settings], dict]

    @property
    def is_search(self) -> bool:
        return self.path == "/search"


def _search_params(granularity: str, rerank: str) -> Callable[[str, Settings], dict]:
    def arguments(query: str, settings: Settings) -> dict:
        params = {"q": query, "k": settings.k, "granularity": granularity, "index": "hnsw"}
        return {"params": params | {"rerank": rerank}}

    return arguments


WORKLOADS = (
    Workload("embed", "POST", "/embed", lambda query, _: {"json": {"texts": [query]}}),
    Workload("coarse", "GET", "/search", _search_params("coarse", "none")),
    Workload("fine", "GET", "/search", _search_params("fine", "none")),
    Workload("c2f", "GET", "/search", _search_params("fine", "c2f")),
)
EXACT_TRUTH = {"coarse": "coarse", "fine": "fine", "c2f": "fine"}
"""The granularity of the exact search each search workload's recall is measured against."""


# -- corpus ------------------------------------------------------------------------------------


def corpus(settings: Settings) -> tuple[list[str], list[str], list[str], dict]:
    """``(documents, their sources, queries, description)``; see the module docstring."""
    folder = data_dir()
    clinc = json.loads((folder / "clinc150" / "data_full.json").read_text(encoding="utf-8"))
    rng = np.random.default_rng(settings.seed)
    test_texts = list(dict.fromkeys(text for text, _ in clinc["test"]))
    if settings.queries > len(test_texts):
        raise SystemExit(f"--queries: at most {len(test_texts)} CLINC-150 test utterances")
    picked = rng.choice(len(test_texts), settings.queries, replace=False)
    queries = [test_texts[i] for i in picked]
    held_out = set(queries)
    texts, sources = [], []
    for source, sentences in real_sentences(folder).items():
        kept = [text for text in sentences if text not in held_out]
        texts += kept
        sources += [source] * len(kept)
    order = rng.permutation(len(texts))[: settings.documents]
    texts, sources = [texts[i] for i in order], [sources[i] for i in order]
    real = len(texts)
    seen = set(texts) | held_out
    while len(texts) < settings.documents:
        first, second = rng.choice(real, 2, replace=False)
        text = f"{texts[first]} {texts[second]}"
        if text not in seen:
            seen.add(text)
            texts.append(text)
            sources.append("composed")
    description = {
        "documents": len(texts),
        "real_sentences": real,
        "composed_documents": len(texts) - real,
        "by_source": dict(Counter(sources)),
        "queries": f"{len(queries)} CLINC-150 in-scope test utterances, held out of the corpus",
    }
    return texts, sources, queries, description


async def ingest(
    base_url: str, texts: Sequence[str], sources: Sequence[str], settings: Settings, progress: bool
) -> None:
    """``POST /documents`` in batches from ``ingest_clients`` concurrent clients."""
    starts = iter(range(0, len(texts), settings.ingest_batch))
    bar = tqdm(total=len(texts), desc="ingest", unit="doc", disable=not progress)

    async def client_loop(client: httpx.AsyncClient) -> None:
        for start in starts:
            stop = min(start + settings.ingest_batch, len(texts))
            documents = [
                {"id": f"doc-{i:07d}", "text": texts[i], "metadata": {"source": sources[i]}}
                for i in range(start, stop)
            ]
            response = await client.post("/documents", json={"documents": documents})
            response.raise_for_status()
            bar.update(stop - start)

    async with httpx.AsyncClient(base_url=base_url, timeout=600) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(settings.ingest_clients)))
    bar.close()


# -- measuring ---------------------------------------------------------------------------------


async def run_cell(
    client: httpx.AsyncClient,
    workload: Workload,
    queries: Sequence[str],
    concurrency: int,
    requests: int,
    seconds: float,
    offset: int,
    settings: Settings,
) -> dict:
    """Keep ``concurrency`` requests in flight until ``requests`` are sent or ``seconds`` pass."""
    loop = asyncio.get_running_loop()
    counter = itertools.count()
    latencies: list[float] = []
    outcomes: Counter[str] = Counter()
    server: list[dict] = []
    started = loop.time()
    deadline = started + seconds

    async def worker() -> None:
        while loop.time() < deadline and (i := next(counter)) < requests:
            query = queries[(offset + i) % len(queries)]
            sent = loop.time()
            try:
                response = await client.request(
                    workload.method, workload.path, **workload.arguments(query, settings)
                )
            except httpx.HTTPError as error:
                outcomes[type(error).__name__] += 1
                continue
            outcomes[str(response.status_code)] += 1
            if response.status_code == 200:
                latencies.append(loop.time() - sent)
                if workload.is_search:
                    server.append(response.json()["timings_ms"])

    cpu = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = loop.time() - started
    ms = np.asarray(latencies) * MS
    row = {
        "workload": workload.name,
        "concurrency": concurrency,
        "requests": sum(outcomes.values()),
        "ok": len(latencies),
        "failed": sum(outcomes.values()) - len(latencies),
        "outcomes": dict(outcomes),
        "seconds": elapsed,
        "qps": len(latencies) / elapsed,
        "client_cpu_share": (time.process_time() - cpu) / elapsed,
    }
    for name, q in (("p50_ms", 50), ("p95_ms", 95), ("p99_ms", 99)):
        row[name] = float(np.percentile(ms, q)) if len(ms) else None
    if server:
        row["server_median_ms"] = {
            stage: float(np.median([timings[stage] for timings in server]))
            for stage in ("encode", "search", "rerank", "fetch")
        }
    return row


def recall(base_url: str, queries: Sequence[str], settings: Settings) -> dict[str, float]:
    """Recall@10 of each search workload against exact search at its truth's granularity."""
    batch = 64

    def hit_ids(**options: str) -> list[set[str]]:
        found = []
        with httpx.Client(base_url=base_url, timeout=600) as client:
            for start in range(0, len(queries), batch):
                body = {"queries": list(queries[start : start + batch]), "k": settings.k}
                response = client.post("/search", json=body | options)
                response.raise_for_status()
                found += [{hit["id"] for hit in r["hits"]} for r in response.json()["results"]]
        return found

    exact = {g: hit_ids(granularity=g, index="exact") for g in ("coarse", "fine")}
    scores = {}
    for workload in WORKLOADS:
        if workload.is_search:
            params = workload.arguments("", settings)["params"]
            options = {key: params[key] for key in ("granularity", "index", "rerank")}
            truth = exact[EXACT_TRUTH[workload.name]]
            pairs = zip(hit_ids(**options), truth, strict=True)
            scores[workload.name] = float(np.mean([len(a & t) / settings.k for a, t in pairs]))
    return scores


async def load(base_url: str, queries: Sequence[str], settings: Settings, say: Progress) -> list:
    """Every workload at every concurrency; the workloads of one concurrency run back to back."""
    rows = []
    limits = httpx.Limits(max_connections=max(settings.concurrency))
    async with httpx.AsyncClient(base_url=base_url, timeout=60, limits=limits) as client:
        for concurrency in settings.concurrency:
            for workload in WORKLOADS:
                offset = len(rows) * settings.requests_per_cell
                await run_cell(
                    client,
                    workload,
                    queries,
                    concurrency,
                    settings.warmup_requests,
                    60.0,
                    offset,
                    settings,
                )
                row = await run_cell(
                    client,
                    workload,
                    queries,
                    concurrency,
                    settings.requests_per_cell,
                    settings.seconds_per_cell,
                    offset,
                    settings,
                )
                rows.append(row)
                say(
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
    coarse = best_within(rows, "coarse", settings.target_p99_ms)
    fine = best_within(rows, "fine", None)
    return [
        {
            "target": f"coarse ≥ {settings.target_coarse_qps:.0f} QPS with p99 ≤ "
            f"{settings.target_p99_ms:.0f} ms",
            "reached": None if coarse is None else coarse["qps"],
            "at_concurrency": None if coarse is None else coarse["concurrency"],
            "met": coarse is not None and coarse["qps"] >= settings.target_coarse_qps,
        },
        {
            "target": f"fine ≥ {settings.target_fine_qps:.0f} QPS",
            "reached": None if fine is None else fine["qps"],
            "at_concurrency": None if fine is None else fine["concurrency"],
            "met": fine is not None and fine["qps"] >= settings.target_fine_qps,
        },
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


def write_markdown(report: dict) -> str:
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
            _f(t["reached"]),
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
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for workload in WORKLOADS:
        rows = [row for row in report["rows"] if row["workload"] == workload.name]
        x = [row["concurrency"] for row in rows]
        left.plot(x, [row["qps"] for row in rows], marker="o", label=workload.name)
        right.plot(x, [row["p99_ms"] or np.nan for row in rows], marker="o", label=workload.name)
    settings = report["settings"]
    right.axhline(settings["target_p99_ms"], color="grey", linestyle="--", linewidth=0.8)
    left.axhline(settings["target_coarse_qps"], color="grey", linestyle="--", linewidth=0.8)
    for axis, label in ((left, "requests per second"), (right, "p99 latency (ms)")):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("concurrent requests")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    documents = report["corpus"]["documents"]
    left.set_title(f"Throughput, {documents:,} documents")
    right.set_title("Tail latency (dashed: target)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def run(
    settings: Settings,
    bundle: Path,
    smoke: bool,
    out: Path,
    progress: bool,
    index_dir: Path | None = None,
    command: str = "python -m benchmarks.http_load",
    tag: str = "",
) -> list[Path]:
    say = Progress(progress)
    header = machine_header(faiss.omp_get_max_threads())
    texts, sources, queries, description = corpus(settings)
    service = {
        "index_kinds": "hnsw,exact",
        "c2f_factor": settings.c2f_factor,
        "snapshot_interval_s": 0,
    }
    with tempfile.TemporaryDirectory() as work:
        folder = index_dir or Path(work) / "index"
        log = Path(work) / "service.log"
        with live_service(bundle, folder, log, **service) as base_url:
            info = httpx.get(f"{base_url}/info", timeout=60).json()
            if info["documents"] == 0:
                say(f"ingesting {len(texts):,} documents")
                asyncio.run(ingest(base_url, texts, sources, settings, progress))
            elif info["documents"] != len(texts):
                raise SystemExit(
                    f"{folder} holds {info['documents']:,} documents, not {len(texts):,}: "
                    "delete it or pass another --index-dir"
                )
            ingest_seconds = say.elapsed
            say("recall of each search workload")
            recalls = recall(base_url, queries[: settings.recall_queries], settings)
            say(f"recall@10 {recalls}")
            rows = asyncio.run(load(base_url, queries, settings, say))
            info = httpx.get(f"{base_url}/info", timeout=60).json()
    record_end_load(header)
    service |= {
        "bundle": str(bundle),
        "bundle_objective": info["manifest"]["objective"],
        "encoder": info["encoder"],
        "limits": info["limits"],
        "indexes": [
            {key: index[key] for key in ("kind", "dimension", "vectors", "bytes")}
            for index in info["indexes"]
        ],
    }
    report = {
        "smoke": smoke,
        "command": command,
        "machine": header,
        "corpus": description,
        "service": service,
        "settings": asdict(settings),
        "setup_seconds": ingest_seconds,
        "recall_at_10": recalls,
        "rows": rows,
        "coarse_vs_fine": coarse_vs_fine(rows),
        "targets": targets(rows, settings),
        "seconds": say.elapsed,
    }
    name = results_name("http_load" + (f"_{tag}" if tag else ""), smoke)
    return publish(out, name, report, write_markdown, plot, say)


def main() -> None:
    parser = benchmark_parser(__doc__, "400 documents, a few requests per cell (seconds)")
    parser.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE, help="bundle folder")
    parser.add_argument("--documents", type=int, help="corpus size (default 100,000)")
    parser.add_argument("--seconds-per-cell", type=float, help="time bound of a cell")
    parser.add_argument(
        "--index-dir", type=Path, help="keep the service's index here and reuse it next time"
    )
    parser.add_argument("--tag", default="", help="added to the result file names")
    args = parser.parse_args()
    if not (args.bundle / "manifest.json").is_file():
        parser.error(f"--bundle {args.bundle}: no manifest.json (make one with `fractal run`)")
    settings = SMOKE if args.smoke else Settings()
    if args.documents:
        settings = replace(settings, documents=args.documents)
    if args.seconds_per_cell:
        settings = replace(settings, seconds_per_cell=args.seconds_per_cell)
    command = "python -m benchmarks.http_load " + " ".join(sys.argv[1:])
    run(
        settings, args.bundle, args.smoke, args.out, not args.quiet, args.index_dir, command,
        args.tag,
    )


if __name__ == "__main__":
    main()
