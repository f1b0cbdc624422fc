"""CPU of the service's request path outside the encoder: the real app in process, lean routes
against FastAPI's own handlers.

    python -m benchmarks request_path --bundle runs/clinc150/bundle-int8 \
        --index-dir runs/http-load-15k          # 15,000 documents (the http_load corpus)
    python -m benchmarks request_path --smoke    # seconds

Loads the service's runtime (bundle, index, the default settings) in this process, ingests the
corpus when the index folder is empty (:func:`benchmarks.harness.live_load.corpus`, encoded by
the real encoder), then sends requests straight to the ASGI app, one after another, through
every middleware, the router, the route and the runtime, as uvicorn would hand them over.
**The encoder is a stand-in**: the runtime's ``embed`` returns the real encoder's vectors for
the held-out queries, computed before the timing starts. So a request costs what the service
spends around the encoder, and nothing of HTTP parsing or the socket (uvicorn's part).

Workloads, one query text per request, cycling through the queries: ``health`` (``GET
/health``, the floor of the middleware stack), ``embed`` (``POST /embed``), ``openai`` (``POST
/v1/embeddings``), ``coarse``, ``fine`` and ``c2f`` (``GET /search`` on the HNSW index, as
:mod:`benchmarks.http_load` sends them) and ``batch`` (``POST /search`` with one query, fine).

Per workload and path: the process CPU time (every thread: a search thread included) per
request, the median of ``rounds`` rounds of ``requests / rounds`` after ``warmup`` untimed. The
two paths are one app whose settings switch between every route lean
(:class:`service.lean_route.LeanRoute`, the service as it runs) and every route on FastAPI's
handler (``lean_routes=false``), in turn within each round, so that both meet the same moments
of a noisy machine and the lean path's gain is read in one run. For the searches, the index
call alone (:meth:`service.search.Searcher.run`: the walk, the C2F funnel, naming the hits and
reading their texts from the store) is timed in this thread on the same query vectors, and the
rest is the request path's own cost.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import faiss
import numpy as np
from matplotlib.figure import Figure
from tqdm import tqdm

from benchmarks.harness.live_load import (
    WORKLOADS,
    CorpusSettings,
    Workload,
    corpus,
    corpus_id,
    openai_workload,
)
from benchmarks.harness.markdown import bullet_list, markdown_table, targets_table
from benchmarks.harness.runner import Progress, option
from encoding.encoder import Encoded
from service.app import create_app
from service.runtime import Runtime
from service.settings import Settings as ServiceSettings
from service.startup import load_runtime

US = 1e6
PATHS = ("lean", "fastapi")
SETTLE_S = 2.0
"""Seconds left after the encoder's last call, for its threads to stop spinning before CPU
time is counted."""


@dataclass(frozen=True)
class Settings(CorpusSettings):
    """Every parameter of a run: the corpus (:class:`CorpusSettings`), then these."""

    documents: int = option(15_000, "corpus size")
    queries: int = 500
    index_dir: Path | None = option(
        None, "keep the index here and reuse it next time (default: a temporary one)"
    )
    requests: int = option(6_000, "timed requests per workload and path")
    rounds: int = 10
    """The requests of a workload are sent in this many rounds; its figure is their median."""
    warmup: int = 200
    target_search_us: float = 400.0
    """Coarse ``GET /search``: CPU outside the encoder and the index call."""


SMOKE = Settings(documents=300, queries=20, requests=40, rounds=2, warmup=5)


@dataclass(frozen=True)
class Call:
    """One request as the ASGI server hands it over."""

    method: str
    path: str
    query: bytes = b""
    body: bytes = b""


HEALTH = Workload("health", "GET", "/health", lambda query, k: {"params": {}})
BATCH = Workload(
    "batch",
    "POST",
    "/search",
    lambda query, k: {"json": {"queries": [query], "k": k, "index": "hnsw"}},
)
SEARCHES = ("coarse", "fine", "c2f", "batch")
"""The workloads that search (``batch`` searches as ``fine`` does)."""


def workloads(model: str) -> tuple[Workload, ...]:
    """Every workload of a run: :data:`HEALTH`, http_load's (with ``openai`` for ``model``)
    and :data:`BATCH`."""
    embed, *searches = WORKLOADS
    return (HEALTH, embed, openai_workload(model), *searches, BATCH)


def _calls(workload: Workload, queries: Sequence[str], k: int) -> list[Call]:
    """``workload``'s request for each query, as the ASGI server hands it over."""
    calls = []
    for query in queries:
        arguments = workload.arguments(query, k)
        body = json.dumps(arguments["json"]).encode() if "json" in arguments else b""
        string = urlencode(arguments.get("params", {})).encode()
        calls.append(Call(workload.method, workload.path, string, body))
    return calls


async def _send(app: Any, call: Call) -> int:
    """Send ``call`` to ``app``; its status."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": call.method,
        "path": call.path,
        "raw_path": call.path.encode(),
        "query_string": call.query,
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(call.body)).encode()),
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
        "scheme": "http",
        "root_path": "",
    }
    pending = [{"type": "http.request", "body": call.body, "more_body": False}]
    answered = asyncio.Event()
    statuses: list[int] = []

    async def receive() -> dict:
        if pending:
            return pending.pop()
        await answered.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    await app(scope, receive, send)
    answered.set()
    return statuses[0]


def _stand_in(runtime: Runtime, queries: Sequence[str], encoded: Encoded) -> None:
    """Replace the runtime's ``embed`` with a stand-in answering ``encoded``, the real
    encoder's vectors for ``queries``."""
    rows = {text: row for row, text in enumerate(queries)}

    async def embed(texts: Sequence[str]) -> Encoded:
        picked = [rows[text] for text in texts]
        return Encoded(encoded.vectors[picked], encoded.tokens[picked])

    runtime.embed = embed  # type: ignore[method-assign]


async def _ingest(runtime: Runtime, texts: Sequence[str], sources: Sequence[str]) -> None:
    batch = 128
    for start in tqdm(range(0, len(texts), batch), desc="ingest", unit="batch", leave=False):
        chunk = texts[start : start + batch]
        metadata = [{"source": source} for source in sources[start : start + batch]]
        ids = [corpus_id(start + i) for i in range(len(chunk))]
        await runtime.add_documents(chunk, ids, metadata)


def _measure_app(runtime: Runtime, queries: Sequence[str], settings: Settings) -> dict:
    """CPU µs per request of every workload through one app serving ``runtime``, on each path
    of :data:`PATHS` (its settings switched between ``lean_routes`` true and false, nothing
    else): the median of ``rounds`` rounds, each sending every workload its share of
    ``requests`` on one path and then on the other, so that both are measured in the same
    moments of a noisy machine."""
    app = create_app(runtime.settings, runtime)
    on_path = {
        path: runtime.settings.model_copy(update={"lean_routes": path == "lean"}) for path in PATHS
    }
    calls = {
        workload.name: _calls(workload, queries, settings.k)
        for workload in workloads(runtime.manifest.name)
    }
    per_round = max(1, settings.requests // settings.rounds)

    async def measure() -> dict:
        rounds: dict[str, dict[str, list[float]]] = {
            path: {name: [] for name in calls} for path in PATHS
        }
        async with app.router.lifespan_context(app):
            for path in PATHS:
                app.state.settings = on_path[path]
                for name, sent in calls.items():
                    status = await _send(app, sent[0])
                    if status != 200:
                        raise SystemExit(f"{name}: {sent[0]} answered {status} ({path})")
                    for i in range(settings.warmup):
                        await _send(app, sent[i % len(sent)])
            for round_number in range(settings.rounds):
                offset = round_number * per_round
                for name, sent in calls.items():
                    for path in PATHS:
                        app.state.settings = on_path[path]
                        started = time.process_time()
                        for i in range(offset, offset + per_round):
                            await _send(app, sent[i % len(sent)])
                        seconds = time.process_time() - started
                        rounds[path][name].append(US * seconds / per_round)
        return {
            path: {name: float(np.median(values)) for name, values in found.items()}
            for path, found in rounds.items()
        }

    return asyncio.run(measure())


def _index_calls(runtime: Runtime, vectors: np.ndarray, settings: Settings) -> dict:
    """CPU µs of the index call of each search workload, on the queries' real vectors, in
    this thread (FAISS on one thread, as in the service's search threads)."""
    faiss.omp_set_num_threads(runtime.settings.faiss_threads)
    searcher = runtime.searcher
    found = {}
    for workload in WORKLOADS:
        if not workload.is_search:
            continue
        options = workload.arguments("", settings.k)["params"]
        plan = searcher.plan(
            k=settings.k,
            granularity=options["granularity"],
            index=options["index"],
            rerank=options["rerank"],
            scoring="cosine",
        )
        for i in range(settings.warmup):
            searcher.run(vectors[i % len(vectors)][None], plan)
        started = time.thread_time()
        for i in range(settings.requests):
            searcher.run(vectors[i % len(vectors)][None], plan)
        found[workload.name] = US * (time.thread_time() - started) / settings.requests
    found[BATCH.name] = found["fine"]
    return found


def _load(folder: Path, settings: Settings) -> Runtime:
    """The service's runtime on ``folder``, with the default settings but these."""
    service = ServiceSettings(
        bundle_dir=settings.bundle,
        index_dir=folder,
        index_kinds=("hnsw", "exact"),
        snapshot_interval_s=0,
    )
    return load_runtime(service)


def _filled(folder: Path, settings: Settings, progress: Progress) -> tuple[list[str], dict]:
    """The held-out queries and the corpus description, the corpus ingested into ``folder``
    first when it is empty (by the real encoder)."""
    texts, sources, queries, description = corpus(settings)
    runtime = _load(folder, settings)
    documents = runtime.refresh_gauges().documents
    if documents != 0 and documents != len(texts):
        raise SystemExit(
            f"{folder} holds {documents:,} documents, not {len(texts):,}: "
            "delete it or pass another --index-dir"
        )
    if documents == 0:
        progress(f"ingesting {len(texts):,} documents")
    asyncio.run(_with_batcher(runtime, texts if documents == 0 else [], sources))
    return queries, description


def run(settings: Settings, progress: Progress) -> dict:
    with tempfile.TemporaryDirectory() as work:
        folder = settings.index_dir or Path(work) / "index"
        queries, description = _filled(folder, settings, progress)
        runtime = _load(folder, settings)
        encoded = runtime.encoder.encode(list(queries))
        time.sleep(SETTLE_S)
        progress("the index calls alone")
        index = _index_calls(runtime, encoded.vectors, settings)
        _stand_in(runtime, queries, encoded)
        progress("requests through the app, lean routes and FastAPI's handlers in turn")
        results = _measure_app(runtime, queries, settings)
        for path in PATHS:
            progress(f"{path}: " + ", ".join(f"{k} {v:.0f} µs" for k, v in results[path].items()))
    rows = [
        {
            "workload": name,
            **{f"{path}_us": results[path][name] for path in PATHS},
            "index_us": index.get(name),  # None for the workloads that do not search
            **{
                f"{path}_outside_index_us": results[path][name] - index.get(name, 0.0)
                for path in PATHS
            },
        }
        for name in results[PATHS[0]]
    ]
    return {
        "corpus": description,
        "settings": asdict(settings),
        "stand_in": "the encoder: the runtime's embed answers precomputed vectors of the real "
        "encoder for the queries",
        "rows": rows,
        "targets": targets(rows, settings),
    }


async def _with_batcher(runtime: Runtime, texts: Sequence[str], sources: Sequence[str]) -> None:
    """Start ``runtime``, ingest ``texts``, stop it (its index written)."""
    runtime.start()
    try:
        await _ingest(runtime, texts, sources)
    finally:
        await runtime.stop()


def targets(rows: Sequence[dict], settings: Settings) -> list[dict]:
    coarse = next(row for row in rows if row["workload"] == "coarse")
    reached = coarse["lean_outside_index_us"]
    return [
        {
            "target": "coarse GET /search: CPU outside the encoder and the index call ≤ "
            f"{settings.target_search_us:.0f} µs",
            "reached": round(reached, 1),
            "met": reached <= settings.target_search_us,
        }
    ]


def _f(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


def markdown(report: dict) -> str:
    table = [
        [
            row["workload"],
            _f(row["fastapi_us"]),
            _f(row["lean_us"]),
            f"{row['fastapi_us'] / row['lean_us']:.2f}×",
            _f(row["index_us"]),
            _f(row["fastapi_outside_index_us"]),
            _f(row["lean_outside_index_us"]),
        ]
        for row in report["rows"]
    ]
    return "\n\n".join(
        [
            "# The request path's CPU outside the encoder"
            + (" (smoke run)" if report["smoke"] else ""),
            f"Command: `{report['command']}`. The app in process, requests one after another; "
            f"**stand-in**: {report['stand_in']}.",
            "## Targets\n\n" + targets_table(report["targets"]),
            "## CPU per request (µs)\n\nProcess CPU per request, every thread; `index call`: "
            "the searcher's call alone on the same query vectors (walk, funnel, names and texts "
            "from the store); `outside`: the request less its index call.\n\n"
            + markdown_table(
                [
                    "workload",
                    "FastAPI handler",
                    "lean route",
                    "FastAPI / lean",
                    "index call",
                    "outside, FastAPI",
                    "outside, lean",
                ],
                table,
            ),
            "## Corpus\n\n" + bullet_list(report["corpus"]),
            "## Settings\n\n" + bullet_list(report["settings"]),
            "## Machine\n\n" + bullet_list(report["machine"]),
        ]
    )


def plot(report: dict, path: Path) -> None:
    figure = Figure(figsize=(9, 4))
    axes = figure.add_subplot()
    names = [row["workload"] for row in report["rows"]]
    x = np.arange(len(names))
    index = [row["index_us"] or 0.0 for row in report["rows"]]
    for offset, key, label in ((-0.2, "fastapi", "FastAPI handler"), (0.2, "lean", "lean route")):
        outside = [row[f"{key}_outside_index_us"] for row in report["rows"]]
        axes.bar(x + offset, index, 0.4, color="lightgrey")
        axes.bar(x + offset, outside, 0.4, bottom=index, label=f"{label}: outside the index call")
    axes.axhline(
        report["settings"]["target_search_us"], color="grey", linestyle="--", linewidth=0.8
    )
    axes.set_xticks(x, names)
    axes.set_ylabel("CPU µs per request (grey: the index call)")
    axes.set_title("The request path outside the encoder (dashed: coarse target)")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
