"""The same corpus in both index backends: the embedded one and Milvus (a milvus-lite server):
recall@10, single-query latency at equal recall and ingest rate, per route.

    python -m benchmarks backends --real-vectors /work/scale-work/real_v5_q1000_s0_<hash>.npz
    python -m benchmarks backends --smoke --out DIR          # seconds: toy vectors, 3,000 documents

The documents are drawn from a labelled mixture fitted to real V5 embeddings
(:mod:`benchmarks.harness.labelled_mixture`; ``--real-vectors`` is the ``.npz`` of real base
vectors and held-out queries that ``python -m benchmarks scale`` caches in its work folder: the
same draws as the filters benchmark's), the queries are the real held-out ones; without
``--real-vectors``, toy labelled vectors stand in. Both backends are opened the way the service
and ``fractal import`` open them (:func:`index.catalog.catalog_for`, the service's default
settings for ``--bundle``: HNSW and exact indexes at the coarse prefix, the bundle's C2F
shortlist prefix and the fine one; HNSW M and efConstruction as the service's), the embedded one
in a folder, the Milvus one (``index_backend=milvus``) in a ``milvus-lite server`` process this
benchmark starts. Each gets the corpus by bulk import, ``--chunk`` documents per upsert (a shard
of ``fractal import``); the ingest time includes every index build:

- **embedded**: the upserts (SQLite store, full-vector file, every HNSW graph and exact index
  updated in each call) and the final snapshot of the indexes (what ``fractal import`` does);
- **milvus**: the upserts (rows mapped here, 1,000-row requests; milvus-lite flushes its
  memtable to a segment inside a write when it is full and builds the segments' indexes in a
  background thread), one flush, then the wait until every segment has every field's index and
  no compaction is pending (read from the server's data folder, :func:`lite_backlog`:
  milvus-lite's ``describe_index`` says ``Finished`` from the start, so it cannot tell).

Routes, each for both backends: **coarse** (HNSW at the coarse prefix), **fine** (HNSW at the full
dimension), **C2F** (k′ = k × the service's ``c2f_factor`` from the shortlist prefix's HNSW graph,
re-ranked exactly at the full dimension: the embedded backend from its full-vector file, Milvus
from the ``full`` vectors its shortlist search returns), and **filtered** (coarse with a filter
that keeps ``--filter-share`` of the documents; each document's metadata is ``{"bucket": b}``, a
random permutation modulo 1,000). Recall@10 is against exact search: at the full dimension for fine
and C2F, at the coarse prefix for coarse, and among the matching documents at the coarse prefix for
filtered. Every efSearch of ``--ef-values`` is run on every query (the queries of one configuration
in one call: the same hits as one call per query, checked on the timed queries); single-query
latency is timed on ``--latency-queries`` of them, one query per call from one client thread (FAISS
on one thread for the embedded backend), the efSearch values of a route interleaved query by query.
The backends are measured one after the other in the same run: the embedded one is imported,
measured and closed before the Milvus server starts, because both at once do not fit a 24 GB
machine at 1M documents (milvus-lite holds about 10 KB a document). Latencies are compared at equal
recall: each backend at its smallest efSearch reaching recall 0.95 and 0.99. milvus-lite searches
each of its segments (at most 100,000 rows each, every one with its own graph) with the efSearch
given and merges the results, so the same efSearch gives the two backends different recall.

milvus-lite is Milvus's development engine: a Python server that keeps segments of at most
100,000 rows and builds one FAISS index per segment and field. Its figures are not those of
Milvus standalone or distributed. Writes ``backends{,_smoke}.{json,md,png}``.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import faiss
import numpy as np
from matplotlib.figure import Figure

from benchmarks.filters import BUCKETS, bucket_filter, buckets
from benchmarks.harness.labelled_mixture import LabelledMixture, LabelledVectors, toy_labelled
from benchmarks.harness.machine import load_average
from benchmarks.harness.markdown import bullet_list, markdown_table, targets_table
from benchmarks.harness.processes import MilvusServer
from benchmarks.harness.runner import DEFAULT_BUNDLE, Progress, bundle_folder, option
from benchmarks.harness.search_measure import faiss_threads, first_reaching, recall_at_k
from bundle import Manifest, load_bundle
from index import Hit
from index.backend import IndexBackend
from index.catalog import catalog_for
from index.filters import Filter
from index.vectors import prefix_unit, unit_rows
from service.settings import Settings as ServiceSettings

K = 10
BACKENDS = ("embedded", "milvus")
ROUTES = ("coarse", "fine", "c2f", "filtered")
EQUAL_RECALL_FLOORS = (0.95, 0.99)
RECALL_TOLERANCE = 0.01
MIXTURE_CHUNK = 100_000
"""Rows per mixture draw (the filters benchmark's: the same seed gives the same documents)."""


@dataclass(frozen=True)
class Settings:
    """Every parameter of a run."""

    documents: int = option(1_000_000, "corpus size N")
    queries: int = option(1000, "held-out real queries; recall@10 is over all of them")
    latency_queries: int = option(
        100, "the first queries, each timed once per configuration, one per call"
    )
    real_vectors: Path | None = option(
        None,
        "an .npz of real embeddings (base_vectors, base_intents, base_domains, queries_vectors: "
        "what `python -m benchmarks scale` caches in its work folder) the documents are drawn "
        "like; default: toy labelled vectors",
    )
    bundle: Path = option(
        DEFAULT_BUNDLE,
        "the bundle whose service layout both backends get (coarse, shortlist and fine prefix)",
        parse=bundle_folder,
    )
    ef_values: tuple[int, ...] = option(
        (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512), "efSearch sweep, both backends"
    )
    latency_ef_values: tuple[int, ...] = option(
        (), "the efSearch values timed (default: every one of --ef-values)"
    )
    filter_share: float = option(
        0.1, "share of the documents the filtered route keeps (0: no filtered route, no metadata)"
    )
    filter_ef_values: tuple[int, ...] = option(
        (128,),
        "efSearch values of the filtered route (milvus-lite evaluates a JSON filter row by row "
        "in Python, on every call: about 80 µs a document)",
    )
    filter_latency_queries: int = option(5, "queries timed on the filtered route")
    chunk: int = option(50_000, "documents per upsert (a shard of `fractal import`)")
    build_threads: int = option(
        0, "FAISS threads building indexes, here and in the milvus-lite server (0: every core)"
    )
    work_dir: Path | None = option(
        None, "folder for both backends' data (default: a temporary one, removed)"
    )
    index_timeout_s: float = option(
        7200.0, "longest wait for milvus-lite's segment indexes after the flush"
    )
    milvus_timeout_s: float = option(
        600.0, "deadline of each Milvus call (a write that flushes a segment can take long)"
    )
    tag: str = option("", "added to the result file names (backends_TAG.*)")
    rank: int = 8
    unlabelled_components: int = 64
    seed: int = 0


SMOKE = Settings(
    documents=3000,
    queries=40,
    latency_queries=10,
    ef_values=(16, 128),
    chunk=1000,
)


def results_name(settings: Settings) -> str:
    return "backends" + (f"_{settings.tag}" if settings.tag else "")


# -- data -------------------------------------------------------------------------------------


def _data(settings: Settings, dim: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """The documents' and the queries' unit vectors, and the data's description."""
    if settings.real_vectors is None:
        toy = toy_labelled(settings.documents + settings.queries, dim, settings.seed)
        vectors = unit_rows(toy.vectors)
        description = {"vectors": "toy labelled vectors (8 domains of 6 intents)"}
        return vectors[settings.queries :], vectors[: settings.queries], description
    saved = np.load(settings.real_vectors)
    real = LabelledVectors(saved["base_vectors"], saved["base_intents"], saved["base_domains"])
    if real.vectors.shape[1] != dim:
        raise ValueError(f"{settings.real_vectors} holds {real.vectors.shape[1]}-d vectors")
    mixture = LabelledMixture.fit(
        real, settings.rank, settings.unlabelled_components, settings.seed
    )
    documents = np.concatenate(
        [
            unit_rows(part.vectors)
            for part in mixture.chunks(settings.documents, settings.seed + 1, MIXTURE_CHUNK)
        ]
    )
    queries = unit_rows(saved["queries_vectors"][: settings.queries])
    made_by = json.loads(str(saved["description"])) if "description" in saved else {}
    description = {
        "vectors": f"{settings.documents:,} draws from a labelled mixture fitted to the "
        f"{len(real):,} real V5 embeddings of {settings.real_vectors.name}",
        "real embeddings": made_by,
        "mixture": mixture.describe(),
        "queries": f"{len(queries):,} real held-out queries (CLINC-150 test texts)",
    }
    return documents, queries, description


def exact_top(
    base: np.ndarray, queries: np.ndarray, rows: np.ndarray | None = None, k: int = K
) -> np.ndarray:
    """Ids of the exact top-``k`` inner products (among ``rows`` when given)."""
    index = faiss.IndexFlatIP(base.shape[1])
    if rows is None:
        index.add(np.ascontiguousarray(base))
        return index.search(queries, k)[1]
    index.add(np.ascontiguousarray(base[rows]))
    found = index.search(queries, k)[1]
    return np.where(found >= 0, rows[np.maximum(found, 0)], -1)


def exact_c2f(
    documents: np.ndarray, queries: np.ndarray, shortlist_dim: int, shortlist: int
) -> np.ndarray:
    """C2F with exact steps: the best ``shortlist`` by cosine at the shortlist prefix, re-ranked
    by full-dimension cosine; the top-``K`` ids."""
    candidates = exact_top(
        prefix_unit(documents, shortlist_dim), prefix_unit(queries, shortlist_dim), k=shortlist
    )
    scores = np.einsum("qsd,qd->qs", documents[candidates], queries)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :K]
    return np.take_along_axis(candidates, order, axis=1)


# -- the two backends -------------------------------------------------------------------------


def service_settings(settings: Settings, backend: str, index_dir: Path, uri: str = "") -> dict:
    """The service settings a backend is opened with: the service's defaults but for these."""
    chosen: dict = {"bundle_dir": settings.bundle, "index_dir": index_dir, "index_backend": backend}
    if backend == "milvus":
        chosen |= {"milvus_uri": uri, "milvus_timeout_s": settings.milvus_timeout_s}
    return chosen


def _open(settings: Settings, manifest: Manifest, chosen: dict) -> IndexBackend:
    """The default collection, opened by the service's factory."""
    return catalog_for(ServiceSettings(**chosen), manifest).open_default()


def _metadata(settings: Settings, bucket: np.ndarray, rows: slice) -> list[dict] | None:
    if not settings.filter_share:
        return None
    return [{"bucket": int(b)} for b in bucket[rows]]


def _upsert_all(
    collection: IndexBackend,
    documents: np.ndarray,
    settings: Settings,
    bucket: np.ndarray,
    name: str,
    progress: Progress,
) -> dict:
    """Upsert every document, ``--chunk`` at a time: total and slowest call (s)."""
    seconds, slowest = 0.0, 0.0
    for start in range(0, len(documents), settings.chunk):
        rows = slice(start, start + settings.chunk)
        count = len(documents[rows])
        ids = [str(row) for row in range(start, start + count)]
        metadata = _metadata(settings, bucket, rows)
        started = time.perf_counter()
        collection.upsert(ids, ["synthetic document"] * count, documents[rows], metadata)
        took = time.perf_counter() - started
        seconds, slowest = seconds + took, max(slowest, took)
        done = start + count
        if done == len(documents) or done % (10 * settings.chunk) == 0:
            progress(f"{name}: {done:,} documents upserted ({done / seconds:,.0f}/s so far)")
    return {"upsert_s": seconds, "slowest_upsert_s": slowest}


def lite_backlog(data_dir: Path, collection: str) -> dict:
    """What a milvus-lite server still has to do for ``collection``, read from its data folder:
    data files (segments) without an index file for an indexed field, and whether its
    compaction would merge files now (milvus-lite's own selection rule). Its manifest version
    changes with every flush and compaction."""
    from milvus_lite.constants import COMPACTION_BUCKET_BOUNDARIES
    from milvus_lite.engine.compaction import CompactionManager
    from milvus_lite.index.files import index_sidecar_path

    folder = data_dir / "collections" / collection
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    specs = manifest.get("index_specs", {})
    segments = missing = 0
    pending = False
    for partition, contents in manifest.get("partitions", {}).items():
        partition_dir = folder / "partitions" / partition
        files = contents.get("data_files", [])
        segments += len(files)
        for data_file in files:
            for spec in specs.values():
                sidecar = index_sidecar_path(
                    str(partition_dir / "indexes"),
                    data_file,
                    spec["field_name"],
                    spec["index_type"],
                    scalar=False,
                )
                missing += not os.path.exists(sidecar)
        by_size: list[list[tuple[str, int]]] = [
            [] for _ in range(len(COMPACTION_BUCKET_BOUNDARIES) + 1)
        ]
        for data_file in files:
            size = (partition_dir / data_file).stat().st_size
            by_size[CompactionManager._bucket_index(size)].append((data_file, size))
        pending |= (
            CompactionManager._select_target(by_size, len(files), str(partition_dir)) is not None
        )
    return {
        "version": manifest.get("version"),
        "segments": segments,
        "unindexed": missing,
        "compaction_pending": pending,
    }


def wait_for_lite_indexes(
    data_dir: Path, collection: str, timeout_s: float, progress: Progress
) -> dict:
    """Until every segment of ``collection`` has all its indexes and nothing is left to compact,
    the same on two looks a second apart; the last look."""
    deadline = time.monotonic() + timeout_s
    previous: dict | None = None
    last_report = time.monotonic()
    while True:
        try:
            backlog = lite_backlog(data_dir, collection)
        except FileNotFoundError:  # a compaction removed a file the manifest read still named
            backlog = {"unindexed": None, "compaction_pending": True}
        settled = backlog["unindexed"] == 0 and not backlog["compaction_pending"]
        if settled and backlog == previous:
            return backlog
        if time.monotonic() > deadline:
            raise TimeoutError(f"milvus-lite indexes not built after {timeout_s:.0f} s: {backlog}")
        if time.monotonic() - last_report > 60:
            progress(f"milvus: waiting for indexes: {backlog}")
            last_report = time.monotonic()
        previous = backlog if settled else None
        time.sleep(1.0)


def _describe_index(collection: IndexBackend, field: str) -> dict:
    """What Milvus's ``describe_index`` says of one field (state, rows indexed)."""
    described = collection.connection.call(  # type: ignore[attr-defined]
        "describe_index",
        lambda client: client.describe_index(collection.name, index_name=field),  # type: ignore[attr-defined]
    )
    keys = ("state", "indexed_rows", "total_rows", "pending_index_rows")
    return {key: described.get(key) for key in keys if key in (described or {})}


def _folder_bytes(path: Path) -> int:
    return sum(item.stat().st_size for item in path.rglob("*") if item.is_file())


def _rss_bytes(pid: int) -> int | None:
    """Resident memory of a process (``VmRSS``), None when it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


# -- searching --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    """How a route searches: the prefix dimension of its HNSW graph, C2F's k′ (0: not C2F) and
    whether it is filtered."""

    name: str
    dim: int
    shortlist: int = 0
    filtered: bool = False

    def search(
        self, collection: IndexBackend, ef_search: int, where: Filter | None
    ) -> Callable[[np.ndarray], list[list[Hit]]]:
        if self.shortlist:
            factor = self.shortlist // K
            return lambda queries: collection.search_c2f(
                queries, K, self.dim, factor, "hnsw", ef_search=ef_search
            ).hits
        condition = where if self.filtered else None
        return lambda queries: collection.search(
            queries, K, self.dim, "hnsw", ef_search=ef_search, where=condition
        ).hits


def routes(settings: Settings, manifest: Manifest, factor: int) -> list[Route]:
    listed = [
        Route("coarse", manifest.coarse_dim),
        Route("fine", manifest.fine_dim),
        Route("c2f", manifest.shortlist_dim, shortlist=K * factor),
    ]
    if settings.filter_share:
        listed.append(Route("filtered", manifest.coarse_dim, filtered=True))
    return listed


def _ids(hits: list[list[Hit]]) -> np.ndarray:
    found = np.full((len(hits), K), -1, np.int64)
    for row, query_hits in enumerate(hits):
        found[row, : len(query_hits)] = [int(hit.id) for hit in query_hits[:K]]
    return found


def _sweep(
    collections: dict[str, IndexBackend],
    route: Route,
    ef_values: Sequence[int],
    queries: np.ndarray,
    truth: np.ndarray,
    where: Filter | None,
) -> tuple[list[dict], dict]:
    """Every efSearch on every query, all queries in one call; the rows and the found ids."""
    rows, found = [], {}
    for backend, collection in collections.items():
        for ef in ef_values:
            started = time.perf_counter()
            ids = _ids(route.search(collection, ef, where)(queries))
            rows.append(
                {
                    "route": route.name,
                    "backend": backend,
                    "ef_search": ef,
                    "ef_used": max(ef, route.shortlist or K),
                    "recall_at_10": recall_at_k(ids, truth, K),
                    "k_hits_fraction": float(np.mean((ids >= 0).sum(axis=1) == K)),
                    "batch_s": time.perf_counter() - started,
                }
            )
            found[backend, ef] = ids
    return rows, found


def _latency(
    collections: dict[str, IndexBackend],
    route: Route,
    ef_values: Sequence[int],
    queries: np.ndarray,
    where: Filter | None,
) -> dict[tuple[str, int], dict]:
    """Single-query latency of every (backend, efSearch), interleaved query by query after one
    untimed query each; the percentiles and the ids each call found. The order of the
    configurations turns by one each query, so that none is always the first one on a new
    query (or right after another backend's call)."""
    searches = {
        (backend, ef): route.search(collection, ef, where)
        for backend, collection in collections.items()
        for ef in ef_values
    }
    for search in searches.values():
        search(queries[:1])
    timings = {key: np.empty(len(queries)) for key in searches}
    found = {key: np.full((len(queries), K), -1, np.int64) for key in searches}
    keys = list(searches)
    for i in range(len(queries)):
        row = queries[i : i + 1]
        turn = i % len(keys)
        for key in keys[turn:] + keys[:turn]:
            search = searches[key]
            started = time.perf_counter_ns()
            hits = search(row)
            timings[key][i] = (time.perf_counter_ns() - started) / 1e3
            found[key][i] = _ids(hits)[0]
    return {
        key: {
            "p50_us": float(np.percentile(timings[key], 50)),
            "p99_us": float(np.percentile(timings[key], 99)),
            "mean_us": float(np.mean(timings[key])),
            "found": found[key],
        }
        for key in searches
    }


# -- run --------------------------------------------------------------------------------------


def plan(route: Route, settings: Settings) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """A route's efSearch sweep, the efSearch values timed (among those) and the queries timed."""
    if route.filtered:
        swept, timed, count = settings.filter_ef_values, (), settings.filter_latency_queries
    else:
        swept, timed, count = (
            settings.ef_values,
            settings.latency_ef_values,
            settings.latency_queries,
        )
    return swept, tuple(ef for ef in timed or swept if ef in swept), count


def _measure_route(
    collections: dict[str, IndexBackend],
    route: Route,
    settings: Settings,
    queries: np.ndarray,
    truth: np.ndarray,
    where: Filter | None,
    progress: Progress,
) -> tuple[list[dict], list[dict]]:
    """A route's sweep rows (recall over every query) and latency entries (the timed queries,
    with their recall and whether each call found what the batch call did)."""
    swept, timed_efs, count = plan(route, settings)
    rows, batch_found = _sweep(collections, route, swept, queries, truth, where)
    progress(
        f"{route.name}: recall@10 "
        + ", ".join(
            f"{row['backend']} ef {row['ef_search']} {row['recall_at_10']:.3f}"
            for row in rows
            if row["ef_search"] in (swept[0], swept[-1])
        )
    )
    timed = queries[:count]
    measured = _latency(collections, route, timed_efs, timed, where)
    entries = []
    for (backend, ef), entry in measured.items():
        single = entry.pop("found")
        batch = batch_found[backend, ef][: len(timed)]
        entries.append(
            entry
            | {
                "route": route.name,
                "backend": backend,
                "ef_search": ef,
                "queries": len(timed),
                "recall_at_10_timed": recall_at_k(single, truth[: len(timed)], K),
                "same_hits_as_batch": float(np.mean((single == batch).all(axis=1))),
            }
        )
    progress(
        f"{route.name}: p50 at ef {timed_efs[-1]}: "
        + ", ".join(f"{b} {measured[b, timed_efs[-1]]['p50_us']:,.0f} µs" for b in collections)
    )
    return rows, entries


def _import_embedded(
    settings: Settings,
    manifest: Manifest,
    work: Path,
    documents: np.ndarray,
    bucket: np.ndarray,
    progress: Progress,
) -> tuple[IndexBackend, dict]:
    chosen = service_settings(settings, "embedded", work / "embedded")
    with faiss_threads(settings.build_threads):
        collection = _open(settings, manifest, chosen)
        ingest = _upsert_all(collection, documents, settings, bucket, "embedded", progress)
        started = time.perf_counter()
        collection.snapshot()
        ingest["snapshot_s"] = time.perf_counter() - started
    ingest["total_s"] = ingest["upsert_s"] + ingest["snapshot_s"]
    ingest["documents_per_s"] = len(documents) / ingest["total_s"]
    stats = collection.stats()
    ingest["ingest_seconds"] = stats.ingest_seconds
    ingest["index_bytes"] = {name: entry.bytes for name, entry in stats.indexes.items()}
    ingest["disk_bytes"] = _folder_bytes(work / "embedded")
    ingest["settings"] = {key: str(value) for key, value in chosen.items()}
    progress(f"embedded: ingest {ingest['documents_per_s']:,.0f} documents/s")
    return collection, ingest


def _import_milvus(
    settings: Settings,
    manifest: Manifest,
    server: MilvusServer,
    documents: np.ndarray,
    bucket: np.ndarray,
    progress: Progress,
) -> tuple[IndexBackend, dict]:
    chosen = service_settings(settings, "milvus", server.directory / "unused", server.uri)
    started = time.perf_counter()
    collection = _open(settings, manifest, chosen)
    ingest: dict = {"create_s": time.perf_counter() - started}
    ingest |= _upsert_all(collection, documents, settings, bucket, "milvus", progress)
    started = time.perf_counter()
    collection.connection.call(  # type: ignore[attr-defined]
        "flush",
        lambda client: client.flush(collection.name),  # type: ignore[attr-defined]
    )
    ingest["flush_s"] = time.perf_counter() - started
    ingest["describe_index_after_flush"] = _describe_index(
        collection,
        collection._fields()[-1].name,  # type: ignore[attr-defined]
    )
    started = time.perf_counter()
    data_dir = server.directory / "milvus"
    ingest["backlog_after_flush"] = lite_backlog(data_dir, collection.name)  # type: ignore[attr-defined]
    ingest["settled"] = wait_for_lite_indexes(
        data_dir,
        collection.name,  # type: ignore[attr-defined]
        settings.index_timeout_s,
        progress,
    )
    ingest["index_wait_s"] = time.perf_counter() - started
    ingest["total_s"] = sum(ingest[key] for key in ("create_s", "upsert_s", "flush_s"))
    ingest["total_s"] += ingest["index_wait_s"]
    ingest["documents_per_s"] = len(documents) / ingest["total_s"]
    ingest["ingest_seconds"] = collection.stats().ingest_seconds
    ingest["disk_bytes"] = _folder_bytes(data_dir)
    ingest["segment_rows"] = _segment_rows(data_dir, collection.name)  # type: ignore[attr-defined]
    ingest["server_rss_bytes"] = _rss_bytes(server.process.pid) if server.process else None
    ingest["settings"] = {key: str(value) for key, value in chosen.items() if key != "index_dir"}
    progress(
        f"milvus: ingest {ingest['documents_per_s']:,.0f} documents/s "
        f"({ingest['settled']['segments']} segments)"
    )
    return collection, ingest


def _segment_rows(data_dir: Path, collection: str) -> list[int]:
    """Rows per milvus-lite segment (from its data files' names: ``data_FIRST_LAST``)."""
    manifest = json.loads(
        (data_dir / "collections" / collection / "manifest.json").read_text(encoding="utf-8")
    )
    rows = []
    for contents in manifest.get("partitions", {}).values():
        for data_file in contents.get("data_files", []):
            import pyarrow.parquet as pq

            path = data_dir / "collections" / collection / "partitions"
            matches = list(path.glob(f"*/{data_file}"))
            rows.append(pq.ParquetFile(matches[0]).metadata.num_rows if matches else -1)
    return rows


def _truths(
    settings: Settings,
    manifest: Manifest,
    documents: np.ndarray,
    queries: np.ndarray,
    shortlist: int,
) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Each route's exact top-``K``, and the recall@10 its route reaches with exact steps: 1
    but for C2F, whose k′ shortlist at a prefix misses some of the full dimension's top-10."""
    coarse = prefix_unit(documents, manifest.coarse_dim)
    coarse_queries = prefix_unit(queries, manifest.coarse_dim)
    full = exact_top(documents, queries)
    truth = {"coarse": exact_top(coarse, coarse_queries), "fine": full, "c2f": full}
    pipeline = exact_c2f(documents, queries, manifest.shortlist_dim, shortlist)
    ceilings = {"coarse": 1.0, "fine": 1.0, "c2f": recall_at_k(pipeline, full, K)}
    if settings.filter_share:
        matching = np.flatnonzero(
            buckets(settings.documents, settings.seed) < round(settings.filter_share * BUCKETS)
        )
        truth["filtered"] = exact_top(coarse, coarse_queries, matching)
        ceilings["filtered"] = 1.0
    return truth, ceilings


def run(settings: Settings, progress: Progress) -> dict:
    faiss.omp_set_num_threads(1)
    manifest = load_bundle(settings.bundle)
    factor = ServiceSettings(bundle_dir=settings.bundle).c2f_factor
    documents, queries, data = _data(settings, manifest.dim)
    bucket = buckets(settings.documents, settings.seed)
    progress(f"{len(documents):,} documents, {len(queries):,} queries")
    with faiss_threads(settings.build_threads):
        truth, ceilings = _truths(settings, manifest, documents, queries, K * factor)
    where = bucket_filter(settings.filter_share) if settings.filter_share else None
    results: dict = {
        "data": data,
        "bundle": {
            "path": str(settings.bundle),
            "name": manifest.name,
            "hash": manifest.content_hash[:12],
            "coarse_dim": manifest.coarse_dim,
            "shortlist_dim": manifest.shortlist_dim,
            "fine_dim": manifest.fine_dim,
        },
        "c2f_shortlist": K * factor,
        "exact_pipeline_recall": ceilings,
        "ingest": {},
        "sweep": [],
        "latency": [],
    }
    threads = settings.build_threads or os.cpu_count() or 1
    work = Path(tempfile.mkdtemp(prefix="backends-", dir=settings.work_dir))
    server = MilvusServer(work / "milvus-server", environment={"OMP_NUM_THREADS": str(threads)})
    measured = {
        "settings": settings,
        "manifest": manifest,
        "factor": factor,
        "queries": queries,
        "truth": truth,
        "where": where,
        "progress": progress,
        "results": results,
    }
    try:
        results["phases"] = {"embedded": {"load_average_1_5_15_min_at_start": load_average()}}
        embedded, results["ingest"]["embedded"] = _import_embedded(
            settings, manifest, work, documents, bucket, progress
        )
        results["phases"]["embedded"]["load_average_1_5_15_min_after_ingest"] = load_average()
        _measure_backend("embedded", embedded, **measured)
        embedded.close()
        del embedded  # its indexes leave memory before milvus-lite's come in
        gc.collect()
        results["phases"]["milvus"] = {"load_average_1_5_15_min_at_start": load_average()}
        server.directory.mkdir(parents=True)
        server.start()
        milvus, results["ingest"]["milvus"] = _import_milvus(
            settings, manifest, server, documents, bucket, progress
        )
        results["phases"]["milvus"]["load_average_1_5_15_min_after_ingest"] = load_average()
        del documents
        results["milvus_server"] = {
            "engine": "milvus-lite " + milvus.connection.server_version(),  # type: ignore[attr-defined]
            "omp_threads": threads,
        }
        _measure_backend("milvus", milvus, **measured)
        results["milvus_server"]["rss_bytes_after_searches"] = _rss_bytes(server.process.pid)  # type: ignore[union-attr]
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return _report(settings, results)


def _measure_backend(
    backend: str,
    collection: IndexBackend,
    *,
    settings: Settings,
    manifest: Manifest,
    factor: int,
    queries: np.ndarray,
    truth: dict[str, np.ndarray],
    where: Filter | None,
    progress: Progress,
    results: dict,
) -> None:
    """Every route's sweep and latency on one backend, into ``results``."""
    progress.checkpoint(_report(settings, results))
    with faiss_threads(1):
        for route in routes(settings, manifest, factor):
            rows, timed = _measure_route(
                {backend: collection}, route, settings, queries, truth[route.name], where, progress
            )
            results["sweep"] += rows
            results["latency"] += timed
            progress.checkpoint(_report(settings, results))


# -- report -----------------------------------------------------------------------------------


def _swept(report: dict, route: str) -> list[int]:
    """The efSearch values a route was swept over, in order."""
    return sorted({row["ef_search"] for row in report["sweep"] if row["route"] == route})


def _point(report: dict, route: str, backend: str, ef: int) -> dict | None:
    """The sweep row of (route, backend, efSearch) with its latency, if timed."""
    row = next(
        (
            r
            for r in report["sweep"]
            if (r["route"], r["backend"], r["ef_search"]) == (route, backend, ef)
        ),
        None,
    )
    if row is None:
        return None
    timed = next(
        (
            r
            for r in report["latency"]
            if (r["route"], r["backend"], r["ef_search"]) == (route, backend, ef)
        ),
        {},
    )
    return row | {key: timed.get(key) for key in ("p50_us", "p99_us")}


def floors(report: dict, route: str) -> list[float]:
    """A route's recall floors: 0.95 and 0.99, each at most what the route reaches with exact
    steps less 0.01 (C2F: its k′ shortlist bounds its recall)."""
    ceiling = report["exact_pipeline_recall"][route]
    return sorted({round(min(floor, ceiling - 0.01), 3) for floor in EQUAL_RECALL_FLOORS})


def equal_recall(report: dict) -> list[dict]:
    """Per route and recall floor: each backend's smallest efSearch reaching it, and the ratio
    of their p50 latencies (Milvus / embedded)."""
    entries = []
    for route in dict.fromkeys(row["route"] for row in report["sweep"]):
        for floor in floors(report, route):
            points = {}
            for backend in BACKENDS:
                rows = [
                    r for r in report["sweep"] if r["route"] == route and r["backend"] == backend
                ]
                best = first_reaching(rows, floor, "ef_search")
                points[backend] = best and _point(report, route, backend, best["ef_search"])
            both = all(points[b] and points[b].get("p50_us") for b in BACKENDS)
            entries.append(
                {
                    "route": route,
                    "floor": floor,
                    **points,
                    "p50_ratio": points["milvus"]["p50_us"] / points["embedded"]["p50_us"]
                    if both
                    else None,
                }
            )
    return entries


def _default_ef() -> int:
    return ServiceSettings(bundle_dir=DEFAULT_BUNDLE).hnsw_ef_search


def targets(report: dict) -> list[dict]:
    """Recall@10 on Milvus within 0.01 of the embedded backend's, coarse, fine and C2F, at the
    same k′: at the service's efSearch on both, and at the efSearch each needs for 0.99."""
    result = []
    ef = report["settings"]["default_ef_search"]
    shortlist = report["c2f_shortlist"]
    for route in ("coarse", "fine", "c2f"):
        same = {b: _point(report, route, b, ef) for b in BACKENDS}
        if not any(row["route"] == route for row in report["sweep"]):
            continue
        if not all(same.values()):
            result.append(
                {
                    "target": f"{route}: recall@10 on Milvus within {RECALL_TOLERANCE} of the "
                    f"embedded backend's at the same efSearch ({ef}, the service's)",
                    "reached": f"efSearch {ef} not measured on both",
                    "met": False,
                }
            )
        else:
            embedded, milvus = (same[b]["recall_at_10"] for b in BACKENDS)
            result.append(
                {
                    "target": f"{route}: recall@10 on Milvus within {RECALL_TOLERANCE} of the "
                    f"embedded backend's at the same efSearch ({ef}, the service's)"
                    + (f", k′ = {shortlist}" if route == "c2f" else ""),
                    "reached": f"Milvus {milvus:.3f}, embedded {embedded:.3f} "
                    f"(difference {milvus - embedded:+.3f})",
                    "met": abs(milvus - embedded) <= RECALL_TOLERANCE,
                }
            )
        entry = next(
            (
                e
                for e in report["equal_recall"]
                if e["route"] == route and e["floor"] == floors(report, route)[-1]
            ),
            None,
        )
        if entry is None:
            continue
        reached = [
            f"{b}: "
            + (
                "never"
                if entry[b] is None
                else f"{entry[b]['recall_at_10']:.3f} at ef {entry[b]['ef_search']}"
            )
            for b in BACKENDS
        ]
        met = (
            all(entry[b] for b in BACKENDS)
            and abs(entry["milvus"]["recall_at_10"] - entry["embedded"]["recall_at_10"])
            <= RECALL_TOLERANCE
        )
        result.append(
            {
                "target": f"{route}: recall@10 on Milvus within {RECALL_TOLERANCE} of the "
                f"embedded backend's, each at the smallest efSearch reaching {entry['floor']}"
                + (
                    f", k′ = {shortlist} (exact C2F: "
                    f"{report['exact_pipeline_recall']['c2f']:.3f}, less 0.01)"
                    if route == "c2f"
                    else ""
                ),
                "reached": "; ".join(reached),
                "met": bool(met),
            }
        )
    return result


def _report(settings: Settings, results: dict) -> dict:
    report = {
        "machine": {
            "faiss_threads_search": 1,
            "build_threads": settings.build_threads or "all",
        },
        "settings": asdict(settings) | {"default_ef_search": _default_ef()},
        **results,
    }
    report["equal_recall"] = equal_recall(report)
    return report | {"targets": targets(report)}


def _f(value: float | None, digits: int = 0) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value / 1e3:,.2f}"


def _summary_table(report: dict) -> str:
    cells = []
    ef = report["settings"]["default_ef_search"]
    for entry in report["equal_recall"]:
        if entry["floor"] != floors(report, entry["route"])[-1]:
            continue
        route = entry["route"]
        same = {b: _point(report, route, b, ef) for b in BACKENDS}
        cell = [route, f"{report['exact_pipeline_recall'][route]:.3f}", entry["floor"]]
        for backend in BACKENDS:
            point = same[backend]
            cell.append("—" if point is None else f"{point['recall_at_10']:.3f}")
        for backend in BACKENDS:
            point = entry[backend]
            cell.append(
                "not reached"
                if point is None
                else f"ef {point['ef_search']}: {point['recall_at_10']:.3f}, "
                f"{_ms(point['p50_us'])} / {_ms(point['p99_us'])} ms"
            )
        ratio = entry["p50_ratio"]
        cell.append("—" if ratio is None else f"{ratio:,.0f}×")
        cells.append(cell)
    return markdown_table(
        [
            "route",
            "recall@10 with exact steps",
            "floor",
            f"recall@10 embedded, ef {ef}",
            f"recall@10 Milvus, ef {ef}",
            "embedded at the floor: ef, recall, p50 / p99",
            "Milvus at the floor: ef, recall, p50 / p99",
            "p50 Milvus / embedded",
        ],
        cells,
    )


def _equal_recall_table(report: dict) -> str:
    cells = []
    for entry in report["equal_recall"]:
        cell = [entry["route"], entry["floor"]]
        for backend in BACKENDS:
            point = entry[backend]
            cell += (
                ["not reached", "", "", ""]
                if point is None
                else [
                    point["ef_search"],
                    f"{point['recall_at_10']:.3f}",
                    _ms(point["p50_us"]),
                    _ms(point["p99_us"]),
                ]
            )
        cell.append("—" if entry["p50_ratio"] is None else f"{entry['p50_ratio']:,.1f}×")
        cells.append(cell)
    return markdown_table(
        [
            "route",
            "recall floor",
            "embedded ef",
            "recall",
            "p50 ms",
            "p99 ms",
            "Milvus ef",
            "recall",
            "p50 ms",
            "p99 ms",
            "p50 Milvus / embedded",
        ],
        cells,
    )


def _sweep_table(report: dict) -> str:
    cells = []
    for route in dict.fromkeys(row["route"] for row in report["sweep"]):
        for ef in _swept(report, route):
            cell: list = [route, ef]
            for backend in BACKENDS:
                point = _point(report, route, backend, ef)
                cell += (
                    ["—"] * 3
                    if point is None
                    else [
                        f"{point['recall_at_10']:.3f}",
                        _ms(point["p50_us"]),
                        _ms(point["p99_us"]),
                    ]
                )
            cells.append(cell)
    return markdown_table(
        [
            "route",
            "efSearch",
            "embedded recall@10",
            "p50 ms",
            "p99 ms",
            "Milvus recall@10",
            "p50 ms",
            "p99 ms",
        ],
        cells,
    )


def _ingest_table(report: dict) -> str:
    ingest = report.get("ingest", {})
    n = report["settings"]["documents"]
    cells = []
    embedded = ingest.get("embedded")
    if embedded:
        cells.append(
            [
                "embedded",
                f"{n:,}",
                f"{embedded['documents_per_s']:,.0f}",
                f"{embedded['total_s']:,.1f}",
                f"upserts {embedded['upsert_s']:,.1f} (slowest {embedded['slowest_upsert_s']:.1f}),"
                f" snapshot {embedded['snapshot_s']:,.1f}",
                f"{embedded['disk_bytes'] / 1e9:,.2f}",
            ]
        )
    milvus = ingest.get("milvus")
    if milvus:
        cells.append(
            [
                "milvus (milvus-lite)",
                f"{n:,}",
                f"{milvus['documents_per_s']:,.0f}",
                f"{milvus['total_s']:,.1f}",
                f"create {milvus['create_s']:.1f}, upserts {milvus['upsert_s']:,.1f} (slowest "
                f"{milvus['slowest_upsert_s']:.1f}), flush {milvus['flush_s']:,.1f}, index "
                f"builds after the flush {milvus['index_wait_s']:,.1f}; "
                f"{milvus['settled']['segments']} segments",
                f"{milvus['disk_bytes'] / 1e9:,.2f}",
            ]
        )
    return markdown_table(
        ["backend", "documents", "documents/s", "seconds", "of which (s)", "disk GB"], cells
    )


def _milvus_notes(report: dict) -> str:
    """Segments, latency against efSearch and memory of the milvus-lite server, in words."""
    milvus = report.get("ingest", {}).get("milvus")
    if not milvus:
        return "Not measured."
    n = report["settings"]["documents"]
    rows = milvus["segment_rows"]
    lines = [
        f"- milvus-lite held the {n:,} documents in {len(rows)} segments of {min(rows):,} to "
        f"{max(rows):,} rows (its memtable flushes write segments of what fits in 128 MB; its "
        "compaction merges runs of at least four files up to 200,000 rows and leaves the "
        "rest); every search walks each segment's graph with the efSearch given and merges."
    ]
    for route in dict.fromkeys(row["route"] for row in report["sweep"]):
        timed = [
            entry
            for entry in report["latency"]
            if entry["route"] == route and entry["backend"] == "milvus"
        ]
        if len(timed) > 1:
            low, high = (
                min(timed, key=lambda e: e["ef_search"]),
                max(timed, key=lambda e: e["ef_search"]),
            )
            lines.append(
                f"- {route}: Milvus p50 {_ms(low['p50_us'])} ms at efSearch {low['ef_search']}, "
                f"{_ms(high['p50_us'])} ms at {high['ef_search']}"
            )
    lines.append(
        "- Milvus latency hardly moves with efSearch: the graph walks are a small part of a "
        "call. Most of it is milvus-lite's Python work on every search, which grows with N: a "
        "map from every primary key to its newest row, a validity mask per segment built row "
        "by row, and each hit's whole row (six vector fields) materialised to return it. "
        "A filter on the JSON metadata is evaluated row by row in Python too."
    )
    rss = milvus.get("server_rss_bytes")
    if rss:
        index_bytes = sum(report["ingest"].get("embedded", {}).get("index_bytes", {}).values())
        lines.append(
            f"- Memory: the milvus-lite server's resident set after the import was "
            f"{rss / 1e9:,.1f} GB ({rss / n:,.0f} bytes a document: six float32 vector fields of "
            "1,024 numbers in all, a FAISS index per field and segment, its row structures); "
            f"the embedded backend's indexes take {index_bytes / 1e9:,.1f} GB by FAISS's "
            "accounting, its full vectors a memory-mapped file."
        )
    return "\n".join(lines)


def _encoder_note(report: dict) -> str:
    """A line saying so when the real embeddings were made by another bundle than the one whose
    layout both backends serve."""
    encoder = str(report["data"].get("real embeddings", {}).get("encoder", ""))
    if not encoder or report["bundle"]["hash"] in encoder:
        return ""
    return (
        f"\n\nThe real embeddings were made by another bundle's encoder ({encoder}) than the "
        f"bundle whose layout both backends serve ({report['bundle']['name']}, "
        f"{report['bundle']['hash']}); both backends hold the same vectors, so the comparison "
        "between them is unaffected, but C2F's recall with exact steps is that of these vectors "
        f"at the {report['bundle']['shortlist_dim']}-d prefix."
    )


def markdown(report: dict) -> str:
    settings = report["settings"]
    n = settings["documents"]
    bundle = report["bundle"]
    filtered = any(row["route"] == "filtered" for row in report["sweep"])
    parts = [
        f"# Embedded against Milvus at N = {n:,}{' (smoke run)' if report['smoke'] else ''}",
        f"Measured by `{report['command']}`. The same {n:,} documents, bulk-imported into the "
        "embedded backend (SQLite + FAISS) and into Milvus, both opened by the service's factory "
        f"(`catalog_for`) with the service's default layout for bundle {bundle['name']} "
        f"({bundle['hash']}): HNSW and exact indexes at {bundle['coarse_dim']} (coarse), "
        f"{bundle['shortlist_dim']} (C2F's shortlist) and {bundle['fine_dim']} (fine). k = {K}, "
        f"C2F k′ = {report['c2f_shortlist']} on both. recall@10 over {settings['queries']:,} "
        "held-out queries against exact search (full dimension for fine and C2F, the "
        "coarse prefix for coarse"
        + (
            f", the matching documents at the coarse prefix for filtered, whose filter keeps "
            f"{settings['filter_share']:.0%} of the documents); "
            f"latency over the first {settings['latency_queries']:,} of them (filtered: "
            f"{settings['filter_latency_queries']:,})"
            if filtered
            else f"; no filtered route in this run); latency over the first "
            f"{settings['latency_queries']:,} of them"
        )
        + ", one query per call, one client thread, FAISS "
        "on one thread for the embedded backend, the efSearch values of a route interleaved "
        "query by query. The backends were measured one after the other in this run (the "
        "embedded one closed before the Milvus server started: both at once do not fit this "
        "machine's memory at 1M documents); load average (1, 5, 15 min) at the start of each "
        "and after its ingest: "
        + ", ".join(
            f"{backend} {phase['load_average_1_5_15_min_at_start']}"
            + (
                f" and {phase['load_average_1_5_15_min_after_ingest']}"
                if "load_average_1_5_15_min_after_ingest" in phase
                else ""
            )
            for backend, phase in report.get("phases", {}).items()
        )
        + ".",
        "**milvus-lite is Milvus's development engine**, a pure-Python server that keeps the "
        "data in segments of at most 100,000 rows, each with its own FAISS index per field, and "
        "answers every search in Python over all of them (for each search it also builds a map "
        "of every primary key to drop replaced rows, work that grows with N). These figures are "
        "not those of Milvus standalone or Milvus Distributed (C++ segments, indexes built by "
        "index nodes, query nodes in parallel). They say what the Milvus backend costs against "
        "milvus-lite, and that both backends return the same documents.",
        "## Targets\n\n" + targets_table(report["targets"]),
        "## Per route\n\n"
        "Recall at the service's efSearch on both backends, then each backend at the smallest "
        "efSearch reaching the floor, recall@10 ≥ 0.99 (C2F: what exact C2F reaches with the "
        "same k′, less 0.01), with its single-query p50 / p99.\n\n" + _summary_table(report),
        "## Ingest (bulk import, every index build included)\n\n"
        + _ingest_table(report)
        + "\n\nEmbedded: the upserts update the SQLite store, the full-vector file and every "
        "index (HNSW graphs built as documents arrive), then the snapshot writes the indexes. "
        "Milvus: the upserts (rows mapped to each field's space here, 1,000-row requests; "
        "milvus-lite flushes a full memtable to a segment inside a write, and builds segment "
        "indexes and compacts in a background thread meanwhile), one flush, then the wait "
        "until every segment has every field's index and nothing is left to compact "
        "(milvus-lite's `describe_index` answers "
        f"`{report.get('ingest', {}).get('milvus', {}).get('describe_index_after_flush', {})}` "
        "right after the flush, so it cannot tell).",
        "## What the Milvus figures are made of\n\n" + _milvus_notes(report),
        "## Equal recall\n\n"
        "Each backend at its smallest efSearch reaching the floor (k′ for C2F is the same on "
        "both; C2F's shortlist walk uses max(efSearch, k′)).\n\n" + _equal_recall_table(report),
        "## efSearch sweep\n\n" + _sweep_table(report),
        "## Data\n\n" + bullet_list(report["data"]) + _encoder_note(report),
        "## Parameters\n\n"
        + bullet_list(
            settings
            | {
                "embedded service settings": report.get("ingest", {})
                .get("embedded", {})
                .get("settings"),
                "milvus service settings": report.get("ingest", {})
                .get("milvus", {})
                .get("settings"),
                "milvus server": report.get("milvus_server"),
            }
        ),
        "## Machine\n\n" + bullet_list(report["machine"]),
    ]
    return "\n\n".join(parts)


def plot(report: dict, path: Path) -> None:
    names = list(dict.fromkeys(row["route"] for row in report["sweep"]))
    figure = Figure(figsize=(4.5 * max(len(names), 1), 4.2))
    axes = figure.subplots(1, max(len(names), 1), squeeze=False)[0]
    for axis, route in zip(axes, names, strict=False):
        for backend, color in zip(BACKENDS, ("C0", "C3"), strict=True):
            points = [_point(report, route, backend, ef) for ef in _swept(report, route)]
            points = [p for p in points if p and p.get("p50_us")]
            axis.plot(
                [p["p50_us"] / 1e3 for p in points],
                [p["recall_at_10"] for p in points],
                "o-",
                color=color,
                markersize=4,
                label="Milvus (milvus-lite)" if backend == "milvus" else "embedded",
            )
            # Milvus's points stand in a column (its latency hardly moves): label its ends.
            labelled = points[:: max(1, len(points) // 4)] if backend == "embedded" else []
            labelled += [] if backend == "embedded" else points[:1] + points[-1:]
            for p in labelled:
                axis.annotate(
                    str(p["ef_search"]),
                    (p["p50_us"] / 1e3, p["recall_at_10"]),
                    fontsize=7,
                    textcoords="offset points",
                    xytext=(4, -8) if backend == "embedded" else (-16, -3),
                )
        for floor in floors(report, route):
            axis.axhline(floor, color="grey", linewidth=0.6, linestyle=":")
        ceiling = report["exact_pipeline_recall"][route]
        if ceiling < 1.0:
            axis.axhline(ceiling, color="black", linewidth=0.8, linestyle="--", label="exact C2F")
        axis.set(xscale="log", xlabel="p50 latency per query (ms)", ylabel="recall@10", title=route)
        axis.legend(fontsize=8, loc="lower right")
    figure.suptitle(
        f"recall@10 against p50 latency, N = {report['settings']['documents']:,} "
        "(labels: efSearch; dotted: the recall floors)"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=120)
