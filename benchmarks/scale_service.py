"""The tiered layout through the live service under load from ``wrk``: coarse, fine through C2F
and (where built) fine through HNSW-256, with the Redis cache warm and cold.

    python -m benchmarks scale --sizes 10000000 --bundle runs/clinc150-d5/bundle \
        --keep-index runs/scale-10m                                             # builds the index
    python -m benchmarks scale_service --index-dir runs/scale-10m --bundle runs/clinc150-d5/bundle \
        --fine-hnsw yes
    python -m benchmarks scale_service --smoke --bundle B --out /tmp/x   # ingests a tiny corpus

The service (``python -m service``) opens ``--index-dir`` in the tiered layout
(``FRACTAL_INDEX_KINDS=hnsw``, ``FRACTAL_FINE_INDEX_KINDS=none``: an HNSW graph at the coarse
prefix and at the bundle's C2F shortlist prefix, one graph where they are the same prefix, the
full vectors memory-mapped for C2F's re-rank), with the HNSW parameters, graph
storage and full-vector dtype the folder was built with: read from the record
``benchmarks.scale --keep-index`` leaves in it (``scale_build.json``), so that the service loads
the snapshot instead of rebuilding the graph (``--hnsw-storage`` / ``--full-vectors-dtype`` must
agree with it when given). Start-up time (the restart) and the service's anonymous resident
memory (``RssAnon``) are read when it is ready. Queries are CLINC-150 test utterances sent as
``GET /search`` by ``wrk`` (a compiled generator on the same cores; its own CPU is recorded).
Each route is measured at every ``--connections`` for ``--seconds``:

- **warm**: with ``redis-server`` as the embedding cache, every query sent once before the cells,
  so the encoder is skipped and the cells time routing, index search and fetching;
- **cold**: without a cache, the encoder runs for every request.

With ``--fine-hnsw`` a second service opens the same folder with an HNSW graph at the fine prefix
too (``FRACTAL_FINE_INDEX_KINDS=hnsw``, in the same storage as the coarse graph: the service has
one ``FRACTAL_HNSW_STORAGE``) and the fine route is measured on it. That graph is built first, in
this process, into the folder's snapshot (:func:`build_fine_graph`; its time is reported), so
that the service loads it at start; the snapshot then holds the coarse, shortlist and fine graphs
only (any other graph ``benchmarks.scale`` left there is dropped). Each phase records the
shortlist prefix the service's C2F used (``/info``). The fine route is what a user would
run without the tiered layout. The comparison the
issue asks for is coarse QPS against that fine QPS, warm, at the same concurrency.
"""

from __future__ import annotations

import json
import tempfile
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure

from benchmarks.harness.markdown import bullet_list, markdown_table
from benchmarks.harness.process_cpu import cpu_seconds
from benchmarks.harness.process_memory import status_bytes
from benchmarks.harness.processes import RedisServer, ServiceProcess, start_service
from benchmarks.harness.runner import Progress, bundle_folder, int_list, option, yes_no
from benchmarks.harness.wrk import HttpRequest, run_wrk
from benchmarks.scale import KEPT_RECORD
from bundle import load_bundle
from client import FractalClient
from index.catalog import catalog_for
from service.settings import Settings as ServiceSettings
from training.data.registry import load_dataset

K = 10
TIERED = {"index_kinds": "hnsw", "fine_index_kinds": "none"}
ROUTES = {
    "coarse": {"granularity": "coarse"},
    "c2f": {"granularity": "fine"},
    "fine_hnsw": {"granularity": "fine", "index": "hnsw"},
}
OPENAI = "openai"
"""``POST /v1/embeddings`` with one text, in the cold tiered phase: a request that encodes its
text as a search does and nothing else, so that each search's CPU beyond it is the search
path's own (the index walk included)."""
SMOKE_DOCUMENTS = 300
MS = 1000.0


@dataclass(frozen=True)
class Settings:
    """Every parameter of a run."""

    bundle: Path | None = option(
        None, "the bundle the index was built for", parse=bundle_folder, required=True
    )
    index_dir: Path | None = option(
        None, "an index folder built for --bundle (default: a fresh one with a tiny corpus)"
    )
    connections: tuple[int, ...] = option((1, 8, 32), "open connections per cell", parse=int_list)
    seconds: float = option(20.0, "seconds per cell")
    wrk_threads: int = option(1, "wrk threads (the generator shares the service's cores)")
    queries: int = option(500, "distinct CLINC-150 test queries, cycled")
    ef_search: int = option(128, "HNSW efSearch of the coarse graph (FRACTAL_HNSW_EF_SEARCH)")
    c2f_factor: int = option(4, "C2F shortlist = k × factor (FRACTAL_C2F_FACTOR)")
    hnsw_storage: str | None = option(
        None, "the graphs' storage the index was built with (default: the folder's record, or flat)"
    )
    full_vectors_dtype: str | None = option(
        None,
        "the full vectors' dtype the index was built with (default: the folder's record, or "
        "float16)",
    )
    fine_hnsw: bool = option(
        False, "also serve and measure fine through HNSW-256: yes or no", parse=yes_no
    )
    encoder_threads: int = option(1, "ONNX Runtime threads of the service")
    target_coarse_qps: float = option(1100.0, "cold coarse QPS target at the most connections")
    target_p99_ms: float = option(60.0, "the p99 latency the cold coarse QPS target allows")
    target_search_cpu_ms: float = option(
        0.4, "cold coarse CPU per request beyond a /v1/embeddings request, at the most connections"
    )
    tag: str = option("", "added to the result file names (one file per corpus size, say)")


SMOKE = Settings(connections=(1, 4), seconds=1.0, queries=40, fine_hnsw=True)


def results_name(settings: Settings) -> str:
    return "scale_service" + (f"_{settings.tag}" if settings.tag else "")


def route_requests(route: str, queries: Sequence[str], model: str) -> list[str | HttpRequest]:
    """What wrk sends for ``route``: ``GET /search`` paths, or :data:`OPENAI`'s bodies."""
    if route == OPENAI:
        body = {"model": model}
        return [HttpRequest.post_json("/v1/embeddings", body | {"input": q}) for q in queries]
    return [
        "/search?" + urllib.parse.urlencode({"q": query, "k": K, **ROUTES[route]})
        for query in queries
    ]


def built_with(index_dir: Path | None, settings: Settings) -> dict:
    """How the index folder was built, as service settings: its ``benchmarks.scale`` record
    when it has one, else the tiered layout with flat graphs and float16 vectors (the smoke
    corpus is ingested with these). An option given must agree with the record: a mismatch
    would rebuild every graph at start."""
    given = {
        key: getattr(settings, key)
        for key in ("hnsw_storage", "full_vectors_dtype")
        if getattr(settings, key) is not None
    }
    record = None if index_dir is None else index_dir / KEPT_RECORD
    if record is None or not record.is_file():
        return {**TIERED, "hnsw_storage": "flat", "full_vectors_dtype": "float16", **given}
    built = json.loads(record.read_text(encoding="utf-8"))["service_settings"]
    clashes = [
        f"{key} {value} (built with {built[key]})"
        for key, value in given.items()
        if built[key] != value
    ]
    if clashes:
        raise ValueError(f"{record}: the index was built otherwise: {', '.join(clashes)}")
    return built


def _service_settings(
    settings: Settings, built: dict, redis_url: str | None, fine_hnsw: bool
) -> dict:
    values: dict = {
        **built,
        "hnsw_ef_search": settings.ef_search,
        "c2f_factor": settings.c2f_factor,
        "encoder_threads": settings.encoder_threads,
        "snapshot_interval_s": 0,
        "max_k": K,
    }
    if fine_hnsw:
        values["fine_index_kinds"] = "hnsw"
    if redis_url is not None:
        values["redis_url"] = redis_url
    return values


def _smoke_corpus(
    bundle: Path, index_dir: Path, log: Path, settings: Settings, built: dict
) -> None:
    """A tiny corpus ingested through the service, so that a smoke run needs no prebuilt index."""
    texts = list(load_dataset("clinc150", max_train=SMOKE_DOCUMENTS).train.texts)
    service = start_service(
        bundle, index_dir, log, **_service_settings(settings, built, None, False)
    )
    try:
        with FractalClient(service.base_url) as client:
            client.add_documents([{"text": text} for text in texts[:SMOKE_DOCUMENTS]])
    finally:
        service.shut_down()


def _phase(
    service: ServiceProcess,
    started: float,
    routes: Sequence[str],
    queries: Sequence[str],
    settings: Settings,
    warm: bool,
    progress: Progress,
) -> dict:
    """Start-up figures and every route × connections cell on one running service."""
    ready_s = time.perf_counter() - started
    with FractalClient(service.base_url) as client:
        info = client.info()
        rss = status_bytes(service.process.pid, "RssAnon")
        if warm:
            for route in routes:
                client.search_batch(queries, k=K, **ROUTES[route])
    cells = []
    pid = service.process.pid
    for route in (*routes, *([] if warm else [OPENAI])):
        requests = route_requests(route, queries, info["model"])
        for connections in settings.connections:
            before = cpu_seconds(pid)
            result = run_wrk(
                service.base_url, requests, connections, settings.seconds, settings.wrk_threads
            )
            cpu_ms = MS * (cpu_seconds(pid) - before) / max(1, result.requests)
            progress(
                f"{'warm' if warm else 'cold'} {route} c={connections}: {result.qps:.1f} QPS, "
                f"p50 {result.p50_ms:.1f} ms, p99 {result.p99_ms:.1f} ms, "
                f"service CPU {cpu_ms:.3f} ms/request"
            )
            cells.append(
                {
                    "route": route,
                    "cache": "warm" if warm else "cold",
                    **result.to_json(),
                    "service_cpu_ms": cpu_ms,
                }
            )
    documents = info["documents"]
    return {
        "ready_seconds": ready_s,
        "documents": documents,
        "rss_anon_bytes_at_ready": rss,
        "rss_anon_bytes_per_document": rss / documents if documents else None,
        "shortlist_dim": info["resolutions"]["shortlist_dim"],
        "indexes": info["indexes"],
        "recovery": info["recovery"],
        "cells": cells,
    }


def build_fine_graph(settings: Settings, built: dict, index_dir: Path) -> dict:
    """Build the fine HNSW graph into the folder's snapshot in this process, opening the folder
    as the ``--fine-hnsw`` service does (:func:`index.catalog.catalog_for` with its
    settings), so that the service loads it at start: it would build it before answering
    ``/ready``, and snapshot it at shutdown only after a write. The seconds the open (the build)
    and the snapshot took; nothing is built when the snapshot already holds the graph."""
    values = _service_settings(settings, built, None, True)
    opened = ServiceSettings(bundle_dir=settings.bundle, index_dir=index_dir, **values)
    started = time.perf_counter()
    catalog = catalog_for(opened, load_bundle(opened.bundle_dir))
    collection = catalog.open_default()
    try:
        build_seconds = time.perf_counter() - started
        rebuilt = collection.stats().recovery["rebuilt"]
        started = time.perf_counter()
        if rebuilt:
            collection.snapshot()
        return {
            "rebuilt": rebuilt,
            "build_seconds": build_seconds,
            "snapshot_seconds": time.perf_counter() - started,
        }
    finally:
        collection.close()
        catalog.close()


def _serve(
    settings: Settings, built: dict, index_dir: Path, work: Path, fine_hnsw: bool, warm: bool
) -> tuple[ServiceProcess, float, RedisServer | None]:
    redis = None
    if warm:
        redis_dir = work / f"redis-{fine_hnsw}"
        redis_dir.mkdir(exist_ok=True)
        redis = RedisServer(redis_dir)
        redis.start()
    started = time.perf_counter()
    service = start_service(
        settings.bundle,
        index_dir,
        work / "service.log",
        **_service_settings(settings, built, redis.url if redis else None, fine_hnsw),
    )
    return service, started, redis


def qps_of(cells: Sequence[dict], route: str, cache: str, connections: int) -> float | None:
    for cell in cells:
        if (cell["route"], cell["cache"], cell["connections"]) == (route, cache, connections):
            return cell["qps"]
    return None


def targets(phases: dict, settings: Settings) -> list[dict]:
    """Coarse QPS ≥ 2× fine (HNSW-256) QPS with a warm cache, at the best concurrency of each."""
    cells = [cell for phase in phases.values() for cell in phase["cells"]]
    best = {
        route: max(
            (c["qps"] for c in cells if c["route"] == route and c["cache"] == "warm"), default=None
        )
        for route in ROUTES
    }
    if best["coarse"] is None or best["fine_hnsw"] is None:
        reached: object = "fine through HNSW-256 not measured (run with --fine-hnsw)"
        met = False
    else:
        ratio = best["coarse"] / best["fine_hnsw"]
        reached, met = round(ratio, 2), ratio >= 2.0
    documents = next(iter(phases.values()))["documents"]
    most = max(settings.connections)
    cold = phases.get("tiered_cold", {"cells": []})["cells"]
    coarse = next((c for c in cold if (c["route"], c["connections"]) == ("coarse", most)), None)
    beyond = beyond_openai(phases).get(("tiered_cold", "coarse", most))
    return [
        {
            "target": f"warm cache: coarse QPS >= 2x fine (HNSW-256) QPS, {documents:,} documents",
            "reached": reached,
            "met": met,
        },
        {
            "target": f"cold coarse ≥ {settings.target_coarse_qps:,.0f} QPS at c={most} with p99 "
            f"≤ {settings.target_p99_ms:.0f} ms, {documents:,} documents",
            "reached": "not measured"
            if coarse is None
            else f"{coarse['qps']:.1f} (p99 {coarse['p99_ms']:.1f} ms)",
            "met": coarse is not None
            and coarse["qps"] >= settings.target_coarse_qps
            and coarse["p99_ms"] <= settings.target_p99_ms,
        },
        {
            "target": f"cold coarse CPU per request beyond a /v1/embeddings request at c={most} "
            f"≤ {settings.target_search_cpu_ms} ms (the index walk included)",
            "reached": "not measured" if beyond is None else round(beyond, 3),
            "met": beyond is not None and beyond <= settings.target_search_cpu_ms,
        },
    ]


def beyond_openai(phases: dict) -> dict[tuple[str, str, int], float]:
    """Per cold phase, search route and connections: its service CPU per request minus the
    :data:`OPENAI` cell's at the same connections, in milliseconds."""
    found = {}
    for name, phase in phases.items():
        cpu = {
            (c["route"], c["connections"]): c.get("service_cpu_ms")
            for c in phase["cells"]
            if c["cache"] == "cold"
        }
        for (route, connections), ms in cpu.items():
            embedding = cpu.get((OPENAI, connections))
            if route != OPENAI and ms is not None and embedding is not None:
                found[(name, route, connections)] = ms - embedding
    return found


def run(settings: Settings, progress: Progress) -> dict:
    assert settings.bundle is not None
    queries = list(load_dataset("clinc150", max_test=settings.queries).test.texts)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        index_dir = settings.index_dir
        built = built_with(index_dir, settings)
        if index_dir is None:
            index_dir = work / "index"
            progress(f"ingesting {SMOKE_DOCUMENTS} documents into a fresh index")
            _smoke_corpus(settings.bundle, index_dir, work / "service.log", settings, built)
        plan = [("tiered_warm", False, True), ("tiered_cold", False, False)]
        fine_build = None
        if settings.fine_hnsw:
            plan += [("fine_hnsw_warm", True, True), ("fine_hnsw_cold", True, False)]
            progress("building the fine HNSW graph into the folder's snapshot")
            fine_build = build_fine_graph(settings, built, index_dir)
        phases: dict[str, dict] = {}
        for name, fine_hnsw, warm in plan:
            progress(f"starting the service ({name})")
            service, started, redis = _serve(settings, built, index_dir, work, fine_hnsw, warm)
            try:
                routes = ["fine_hnsw"] if fine_hnsw else ["coarse", "c2f"]
                phases[name] = _phase(service, started, routes, queries, settings, warm, progress)
            finally:
                service.shut_down()
                if redis is not None:
                    redis.kill()
            progress.checkpoint({"settings": _settings_json(settings, built), "phases": phases})
    return {
        "settings": _settings_json(settings, built),
        "fine_hnsw_build": fine_build,
        "phases": phases,
        "targets": targets(phases, settings),
    }


def _settings_json(settings: Settings, built: dict) -> dict:
    return {
        "index built with": built,
        **{
            key: (str(value) if isinstance(value, Path) else value)
            for key, value in settings.__dict__.items()
        },
    }


def markdown(report: dict) -> str:
    phases = report["phases"]
    first = next(iter(phases.values()))
    rows = [
        [
            name,
            f"{phase['documents']:,}",
            f"{phase['ready_seconds']:.1f}",
            f"{phase['rss_anon_bytes_at_ready'] / 2**20:,.0f}",
            "—"
            if phase["rss_anon_bytes_per_document"] is None
            else f"{phase['rss_anon_bytes_per_document']:,.0f}",
            phase.get("shortlist_dim", "—"),
        ]
        for name, phase in phases.items()
    ]
    cells = [
        [
            cell["route"],
            cell["cache"],
            cell["connections"],
            f"{cell['qps']:.1f}",
            f"{cell['p50_ms']:.1f}",
            f"{cell['p99_ms']:.1f}",
            sum(cell["errors"].values()),
            f"{cell['client_cpu_percent']:.0f}",
            "–" if cell.get("service_cpu_ms") is None else f"{cell['service_cpu_ms']:.3f}",
        ]
        for phase in phases.values()
        for cell in phase["cells"]
    ]
    beyond = [
        [name, route, connections, f"{ms:.3f}"]
        for (name, route, connections), ms in beyond_openai(phases).items()
    ]
    verdicts = [
        [t["target"], t["reached"], "met" if t["met"] else "**missed**"]
        for t in report.get("targets", [])
    ]  # none yet in a checkpoint
    return "\n\n".join(
        [
            f"# The tiered layout through the live service, {first['documents']:,} documents",
            markdown_table(["target", "reached", "verdict"], verdicts),
            "## Start-up (a restart on the built folder) and anonymous memory",
            *(
                [f"Fine HNSW graph built before the fine service starts: `{fine}`"]
                if (fine := report.get("fine_hnsw_build"))
                else []
            ),
            markdown_table(
                [
                    "service",
                    "documents",
                    "ready s",
                    "RssAnon MiB",
                    "RssAnon B/doc",
                    "C2F shortlist dim",
                ],
                rows,
            ),
            "## Load from wrk (GET /search, k = 10; `openai`: POST /v1/embeddings, one text)\n\n"
            "`service CPU ms`: the service process's CPU per request over the cell (every "
            "thread, the encoder included).",
            markdown_table(
                [
                    "route",
                    "cache",
                    "connections",
                    "QPS",
                    "p50 ms",
                    "p99 ms",
                    "errors",
                    "wrk CPU %",
                    "service CPU ms",
                ],
                cells,
            ),
            "## CPU per search beyond a /v1/embeddings request (cold: both encode one text)",
            markdown_table(["service", "route", "connections", "CPU ms beyond openai"], beyond),
            "## Settings\n\n" + bullet_list(report["settings"]),
            "## Machine\n\n" + bullet_list(report["machine"]),
        ]
    )


def plot(report: dict, path: Path) -> None:
    figure = Figure(figsize=(7, 4))
    axes = figure.subplots()
    cells = [cell for phase in report["phases"].values() for cell in phase["cells"]]
    for route in (*ROUTES, OPENAI):
        for cache, style in (("warm", "-o"), ("cold", "--s")):
            points = sorted(
                (c["connections"], c["qps"])
                for c in cells
                if c["route"] == route and c["cache"] == cache
            )
            if points:
                x, y = zip(*points, strict=True)
                axes.plot(x, y, style, label=f"{route} ({cache})")
    axes.set_xscale("log", base=2)
    axes.set_xlabel("open connections (wrk)")
    axes.set_ylabel("QPS")
    documents = next(iter(report["phases"].values()))["documents"]
    axes.set_title(f"GET /search through the live service, {documents:,} documents")
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
