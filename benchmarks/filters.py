"""Metadata filters inside every route at a million documents: recall against brute-force filtered
search, and index time against unfiltered search at equal recall.

    python -m benchmarks filters --real-vectors /work/scale-work/real_v5_q1000_s0_<hash>.npz
    python -m benchmarks filters --smoke --out DIR      # seconds: toy vectors, 20K documents

The documents are drawn from a labelled mixture fitted to real V5 embeddings
(:mod:`benchmarks.harness.labelled_mixture`; ``--real-vectors`` is the ``.npz`` of real base
vectors and held-out queries that ``python -m benchmarks scale`` caches in its work folder), the
queries are the real held-out ones. Without ``--real-vectors``, toy labelled vectors stand in.
Every document gets ``{"bucket": b}`` with ``b`` a random permutation of the rows modulo 1,000,
so ``bucket < 500 / 100 / 10 / 1`` keeps 50%, 10%, 1% and 0.1% of them, independently of the
vectors. They are imported into one :class:`index.Collection` (SQLite store with its metadata
index, full vectors in the memory-mapped file) with no index, then opened twice:

- **float32** layout: ``exact``, ``hnsw`` (float32 graph) and ``pq`` at the 64-d coarse prefix,
  ``exact`` at 256-d, SFS (fragments of ``--fragment-dim``) over the same kinds;
- **SQ8** layout: an SQ8 HNSW graph at 64-d.

Routes: **coarse** (cosine at 64-d), **fine** (exact at 256-d), **SFS** (mean fragment cosine
at 64-d), **C2F** (shortlist k × factor at 64-d from each kind, exact re-rank at 256-d). Each is
run unfiltered and at each selectivity with the collection's own policy (:class:`FilterParams`:
the exact subset below ``200 · N^(1/3)`` matches, else the selector; HNSW efSearch raised to
``ef / √s``), one query per call on one FAISS thread, the configurations of one route and kind
interleaved query by query. Recall@10 is against brute-force filtered search over the same
documents (streamed over the corpus, exact); for the lossy kinds (PQ, SQ8) where the selector
answers, also against brute force over the index's own decoded codes, the ranking that path can
reach (unfiltered recall beside it says what the codes cost). C2F's brute force is its own
pipeline over the matching documents: the best k × factor by the shortlist prefix, re-ranked at
256-d.

Also measured: both paths forced at each selectivity (the crossover the policy's threshold comes
from), on ``--crossover-queries`` queries; an efSearch sweep of the coarse graphs (float32, SQ8)
unfiltered and filtered at 10%, for p50 index time at equal recall; and the time to list a
filter's rows from SQLite (cold and cached). *Index* time is the index work alone (the
collection's own timings: listing the filter's rows and reading the hits' ids aside); *call* time
is the whole ``search`` / ``search_c2f`` call. Writes ``filters{,_smoke}.{json,md,png}``.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import faiss
import numpy as np
from matplotlib.figure import Figure

from benchmarks.harness.labelled_mixture import LabelledMixture, LabelledVectors, toy_labelled
from benchmarks.harness.markdown import bullet_list, markdown_table, targets_table
from benchmarks.harness.runner import Progress, option
from benchmarks.harness.search_measure import faiss_threads
from index import Collection, HnswParams, PqParams
from index.embedded import FilterParams
from index.filters import Filter, parse_filter
from index.fragments import fragment_unit
from index.vectors import prefix_unit, unit_rows

K = 10
BUCKETS = 1000
SELECTIVITIES = (0.5, 0.1, 0.01, 0.001)
UNFILTERED = 1.0
EVERY = (UNFILTERED, *SELECTIVITIES)
RECALL_TARGET = 0.99
RATIO_TARGET = 2.0
EQUAL_RECALL_FLOORS = (0.95, 0.99)
LAYOUTS = {
    "flat": {
        "coarse": ("exact", "hnsw", "pq"),
        "fine": ("exact",),
        "sfs": ("exact", "hnsw", "pq"),
        "c2f": ("exact", "hnsw", "pq"),
    },
    "sq8": {"coarse": ("hnsw",), "c2f": ("hnsw",)},
}
"""The routes and kinds measured with each HNSW storage (the SQ8 layout has only the graph)."""
FORCED = {
    "selector": FilterParams(exact_subset_scale=0.0),
    "exact_subset": FilterParams(exact_subset_scale=1e12),
}


@dataclass(frozen=True)
class Settings:
    """Every parameter of a run."""

    documents: int = option(1_000_000, "corpus size N")
    queries: int = option(300, "held-out real queries, each timed once per configuration")
    crossover_queries: int = option(40, "queries run through each forced path")
    real_vectors: Path | None = option(
        None,
        "an .npz of real embeddings (base_vectors, base_intents, base_domains, queries_vectors: "
        "what `python -m benchmarks scale` caches in its work folder) the documents are drawn "
        "like; default: toy labelled vectors",
    )
    work_dir: Path | None = option(None, "folder for the collection (default: a temporary one)")
    m: int = option(32, "HNSW degree M")
    ef_construction: int = option(100, "HNSW efConstruction")
    ef_search: int = option(
        256, "HNSW efSearch of unfiltered searches (filtered: raised; the service default is 128)"
    )
    ef_values: tuple[int, ...] = option(
        (16, 24, 32, 48, 64, 96, 128, 192, 256, 384), "efSearch sweep (coarse graphs, at 10%)"
    )
    pq_m: int = option(16, "PQ sub-quantizers at the 64-d prefix")
    build_threads: int = option(0, "FAISS threads for building (0: every core)")
    coarse_dim: int = 64
    dim: int = 256
    fragment_dim: int = 32
    factor: int = 4
    rank: int = 8
    unlabelled_components: int = 64
    chunk: int = 100_000
    seed: int = 0
    toy_vectors: bool = False


SMOKE = Settings(
    documents=20_000,
    queries=30,
    crossover_queries=10,
    m=16,
    ef_construction=40,
    ef_values=(16, 64, 256),
    pq_m=8,
    chunk=10_000,
    toy_vectors=True,
)


# -- data -------------------------------------------------------------------------------------


def _sources(settings: Settings) -> tuple[Callable[[], Iterator[np.ndarray]], np.ndarray, dict]:
    """A function that yields the documents' unit vectors chunk by chunk (the same every call),
    the queries' unit vectors, and the data's description."""
    if settings.real_vectors is None:
        toy = toy_labelled(settings.documents + settings.queries, settings.dim, settings.seed)
        vectors = unit_rows(toy.vectors)
        documents, queries = vectors[settings.queries :], vectors[: settings.queries]

        def toy_chunks() -> Iterator[np.ndarray]:
            for start in range(0, len(documents), settings.chunk):
                yield documents[start : start + settings.chunk]

        return toy_chunks, queries, {"vectors": "toy labelled vectors (8 domains of 6 intents)"}
    saved = np.load(settings.real_vectors)
    real = LabelledVectors(saved["base_vectors"], saved["base_intents"], saved["base_domains"])
    mixture = LabelledMixture.fit(
        real, settings.rank, settings.unlabelled_components, settings.seed
    )
    queries = unit_rows(saved["queries_vectors"][: settings.queries])

    def mixture_chunks() -> Iterator[np.ndarray]:
        for part in mixture.chunks(settings.documents, settings.seed + 1, settings.chunk):
            yield unit_rows(part.vectors)

    description = {
        "vectors": f"{settings.documents:,} draws from a labelled mixture fitted to the "
        f"{len(real):,} real V5 embeddings of {settings.real_vectors.name}",
        "mixture": mixture.describe(),
        "queries": f"{len(queries):,} real held-out queries (CLINC-150 test texts)",
    }
    return mixture_chunks, queries, description


def buckets(documents: int, seed: int) -> np.ndarray:
    """Each document's bucket: a random permutation of the rows, modulo 1,000 (a filter on
    ``bucket < b`` keeps a share b / 1,000 of them; also the backends benchmark's)."""
    return np.random.default_rng(seed + 2).permutation(documents) % BUCKETS


def bucket_filter(selectivity: float) -> Filter:
    """The filter keeping the share ``selectivity`` of the documents by their bucket."""
    return parse_filter({"key": "bucket", "lt": round(selectivity * BUCKETS)})


class FilteredTopK:
    """Exact top-``k`` of every query over a corpus streamed in chunks, unfiltered and per
    selectivity (the documents whose bucket is below it)."""

    def __init__(self, queries: np.ndarray, k: int, selectivities: Sequence[float]) -> None:
        self.queries = queries
        self.k = k
        self.below = {s: round(s * BUCKETS) for s in selectivities}
        shape = (len(queries), k)
        self.scores = {s: np.full(shape, -np.inf, np.float32) for s in selectivities}
        self.rows = {s: np.full(shape, -1, np.int64) for s in selectivities}

    def add(self, vectors: np.ndarray, rows: np.ndarray, bucket: np.ndarray) -> None:
        scores = self.queries @ vectors.T
        for selectivity, below in self.below.items():
            keep = bucket < below
            if not keep.any():
                continue
            merged = np.concatenate([self.scores[selectivity], scores[:, keep]], axis=1)
            ids = np.concatenate(
                [self.rows[selectivity], np.broadcast_to(rows[keep], (len(scores), keep.sum()))],
                axis=1,
            )
            top = np.argpartition(-merged, self.k - 1, axis=1)[:, : self.k]
            top_scores = np.take_along_axis(merged, top, 1)
            order = np.argsort(-top_scores, axis=1, kind="stable")
            self.scores[selectivity] = np.take_along_axis(top_scores, order, 1)
            self.rows[selectivity] = np.take_along_axis(np.take_along_axis(ids, top, 1), order, 1)


def _spaces(settings: Settings) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """The brute-force scoring spaces of the routes, from full unit vectors."""
    coarse, fragment = settings.coarse_dim, settings.fragment_dim
    return {
        "cosine-64": lambda x: prefix_unit(x, coarse),
        "cosine-256": lambda x: x,
        "sfs-64": lambda x: fragment_unit(x, coarse, fragment),
    }


def _rerank(shortlists: np.ndarray, queries: np.ndarray, full: np.ndarray) -> np.ndarray:
    """C2F's brute force: each query's shortlist (row ids) re-ranked by full-vector cosine
    (``full`` holds row ``r`` at ``r - 1``)."""
    out = np.full((len(queries), K), -1, np.int64)
    for i, rows in enumerate(shortlists):
        rows = rows[rows > 0]
        best = np.argsort(-(full[rows - 1] @ queries[i]), kind="stable")[:K]
        out[i, : len(best)] = rows[best]
    return out


# -- collection -------------------------------------------------------------------------------


def _open(path: Path, settings: Settings, storage: str | None) -> Collection:
    """The collection: no index (``storage`` None), the float32 layout or the SQ8 one."""
    hnsw = HnswParams(
        m=settings.m,
        ef_construction=settings.ef_construction,
        ef_search=settings.ef_search,
        storage=storage or "flat",
    )
    dims = (settings.coarse_dim, settings.dim)
    if storage is None:
        layout: dict[int, tuple[str, ...]] = {settings.coarse_dim: (), settings.dim: ()}
    elif storage == "flat":
        layout = {settings.coarse_dim: ("exact", "hnsw", "pq"), settings.dim: ("exact",)}
    else:
        layout = {settings.coarse_dim: ("hnsw",), settings.dim: ()}
    return Collection(
        path,
        settings.dim,
        dims,
        index_kinds=("exact", "hnsw", "pq"),
        hnsw=hnsw,
        pq=PqParams(m=settings.pq_m),
        fragment_dim=settings.fragment_dim if storage == "flat" else None,
        layout=layout,
    )


@dataclass(frozen=True)
class Config:
    """One way to search: a route, an index kind (and HNSW storage), a selectivity (1.0:
    unfiltered), the filter policy (``auto`` or a forced path) and an efSearch override."""

    route: str
    kind: str
    storage: str
    selectivity: float
    mode: str = "auto"
    ef_search: int | None = None

    @property
    def name(self) -> str:
        kind = f"{self.kind}-sq8" if self.storage == "sq8" else self.kind
        ef = "" if self.ef_search is None else f" ef{self.ef_search}"
        return f"{self.route} {kind} s={self.selectivity:g} {self.mode}{ef}"


def _search(collection: Collection, config: Config, query: np.ndarray, settings: Settings):
    """Run one query; its rows (row ids), index seconds, call seconds and filter report."""
    collection.filters = FORCED.get(config.mode, FilterParams())
    where = None if config.selectivity == UNFILTERED else bucket_filter(config.selectivity)
    started = time.perf_counter()
    if config.route == "c2f":
        result = collection.search_c2f(
            query,
            K,
            settings.coarse_dim,
            settings.factor,
            config.kind,
            ef_search=config.ef_search,
            where=where,
        )
    else:
        dim = settings.dim if config.route == "fine" else settings.coarse_dim
        scoring = "sfs" if config.route == "sfs" else "cosine"
        result = collection.search(
            query,
            K,
            dim,
            config.kind,
            scoring,
            ef_search=config.ef_search,
            where=where,
        )
    called = time.perf_counter() - started
    rows = np.array([int(hit.id) + 1 for hit in result.hits[0]], dtype=np.int64)  # row id + 1
    return rows, sum(result.timings.values()), called, dict(result.filtering or {})


def _measure(
    collection: Collection,
    configs: Sequence[Config],
    queries: np.ndarray,
    settings: Settings,
    progress: Progress,
) -> dict[Config, dict]:
    """Every configuration on every query, interleaved query by query (one call each)."""
    found = {config: np.full((len(queries), K), 0, np.int64) for config in configs}
    index_s = {config: np.zeros(len(queries)) for config in configs}
    call_s = {config: np.zeros(len(queries)) for config in configs}
    reports: dict[Config, list[dict]] = {config: [] for config in configs}
    for config in configs:  # list (and cache) each filter's rows once, untimed
        _search(collection, config, queries[:1], settings)
    for i in range(len(queries)):
        for config in configs:
            rows, index_seconds, call_seconds, report = _search(
                collection, config, queries[i : i + 1], settings
            )
            found[config][i, : len(rows)] = rows
            index_s[config][i], call_s[config][i] = index_seconds, call_seconds
            reports[config].append(report)
    progress(f"  {configs[0].route} {configs[0].kind}: {len(configs)} configurations")
    return {
        config: {
            "found": found[config],
            "index_p50_us": float(np.percentile(index_s[config], 50) * 1e6),
            "index_p99_us": float(np.percentile(index_s[config], 99) * 1e6),
            "call_p50_us": float(np.percentile(call_s[config], 50) * 1e6),
            "reports": reports[config],
        }
        for config in configs
    }


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean over queries of the share of the true top-k found (row ids; 0 / -1: none)."""
    hits = [
        len(np.intersect1d(row[row > 0], true[true > 0])) / max(1, (true > 0).sum())
        for row, true in zip(found, truth, strict=True)
    ]
    return float(np.mean(hits))


def _row(config: Config, measured: dict, truths: dict, matches: int) -> dict:
    """A result row: recall against the brute force of the path taken and against exact
    search, the hits, the paths, the times. ``truths`` holds per selectivity the ``exact``
    filtered top-k in the route's final space and what the ``index`` path can reach (its own
    codes for PQ / SQ8; C2F's pipeline over the matching documents)."""
    reports = measured["reports"]
    found = measured["found"]
    paths = sorted({report["mode"] for report in reports if "mode" in report})
    truth = truths[config.selectivity]
    exact = truth["exact"][: len(found)]
    reachable = exact if paths == ["exact_subset"] else truth["index"][: len(found)]
    return {
        "route": config.route,
        "kind": config.kind,
        "storage": config.storage,
        "selectivity": config.selectivity,
        "mode": config.mode,
        "ef_search_given": config.ef_search,
        "matching": matches,
        "paths": paths,
        "ef_search": sorted({r["ef_search"] for r in reports if "ef_search" in r}),
        "fallback_queries": sum(bool(r.get("fallback")) for r in reports),
        "k_hits_fraction": float(np.mean((found > 0).sum(axis=1) == min(K, matches))),
        "recall": recall(found, reachable),
        "recall_exact": recall(found, exact),
        "index_p50_us": measured["index_p50_us"],
        "index_p99_us": measured["index_p99_us"],
        "call_p50_us": measured["call_p50_us"],
    }


# -- run --------------------------------------------------------------------------------------


def _truth_codes(
    collection: Collection, name: str, queries: np.ndarray, bucket: np.ndarray, k: int
) -> FilteredTopK:
    """Brute force over an index's decoded codes, unfiltered and per selectivity."""
    ids, vectors = collection._indexes[name].decoded()  # the kind's own scores
    order = np.argsort(ids)
    ids, vectors = ids[order], vectors[order]
    topk = FilteredTopK(queries, k, EVERY)
    for start in range(0, len(ids), 200_000):
        rows = ids[start : start + 200_000]
        topk.add(vectors[start : start + 200_000], rows, bucket[rows - 1])
    return topk


def _groups(configs: Sequence[Config]) -> list[list[Config]]:
    """Configurations timed together (interleaved): those of one route and kind, so that a
    graph search is not timed right after exhaustive scans have evicted it from the caches."""
    groups: dict[tuple[str, str], list[Config]] = {}
    for config in configs:
        groups.setdefault((config.route, config.kind), []).append(config)
    return list(groups.values())


def _configs(storage: str, routes: dict[str, tuple[str, ...]]) -> list[Config]:
    return [
        Config(route, kind, storage, selectivity)
        for route, kinds in routes.items()
        for kind in kinds
        for selectivity in (UNFILTERED, *SELECTIVITIES)
    ]


def _crossover(storage: str) -> list[Config]:
    return [
        Config(route, "hnsw", storage, selectivity, mode)
        for route in ("coarse", "c2f")
        for selectivity in SELECTIVITIES
        for mode in FORCED
    ]


def _sweep(storage: str, settings: Settings) -> list[Config]:
    return [
        Config("coarse", "hnsw", storage, selectivity, ef_search=ef)
        for ef in settings.ef_values
        for selectivity in (UNFILTERED, 0.1)
    ]


def _import(
    path: Path, settings: Settings, progress: Progress
) -> tuple[np.ndarray, np.ndarray, dict[str, FilteredTopK], FilteredTopK, dict, dict]:
    """Stream the documents into a collection with no index, with the brute force of every
    space beside; the full unit vectors (kept for C2F's re-rank brute force), the queries, the
    brute force, C2F's exact shortlists, the data's description and the timings."""
    chunks, queries, data = _sources(settings)
    bucket = buckets(settings.documents, settings.seed)
    spaces = _spaces(settings)
    truth = {name: FilteredTopK(space(queries), K, EVERY) for name, space in spaces.items()}
    shortlists = FilteredTopK(spaces["cosine-64"](queries), K * settings.factor, EVERY)
    full = np.empty((settings.documents, settings.dim), np.float32)
    started, brute_force_s, offset = time.perf_counter(), 0.0, 0
    with faiss_threads(settings.build_threads), _open(path, settings, None) as collection:
        for part in chunks():
            rows = np.arange(offset + 1, offset + len(part) + 1)
            full[offset : offset + len(part)] = part
            part_bucket = bucket[offset : offset + len(part)]
            exact_started = time.perf_counter()
            for name, space in spaces.items():
                truth[name].add(space(part), rows, part_bucket)
            shortlists.add(spaces["cosine-64"](part), rows, part_bucket)
            brute_force_s += time.perf_counter() - exact_started
            collection.upsert(
                [str(row - 1) for row in rows],
                ["synthetic document"] * len(part),
                part,
                [{"bucket": int(b)} for b in part_bucket],
            )
            offset += len(part)
            if offset == settings.documents or offset % (10 * settings.chunk) == 0:
                progress(f"imported {offset:,} documents")
        collection.snapshot()
    import_s = time.perf_counter() - started - brute_force_s
    timings = {
        "import_s": import_s,
        "import_per_s": settings.documents / import_s,
        "brute_force_s": brute_force_s,
    }
    return full, queries, truth, shortlists, data, timings


def _truths(
    collection: Collection,
    storage: str,
    settings: Settings,
    full: np.ndarray,
    queries: np.ndarray,
    truth: dict[str, FilteredTopK],
    shortlists: FilteredTopK,
) -> dict[tuple[str, str], dict]:
    """Per (route, kind) of this layout and selectivity: the ``exact`` filtered top-k in the
    route's final space and what the index path can ``index`` reach (see :func:`_row`)."""
    bucket = buckets(settings.documents, settings.seed)
    spaces = _spaces(settings)
    coarse_queries = spaces["cosine-64"](queries)

    def pair(exact: dict, index: dict | None = None) -> dict:
        return {s: {"exact": exact[s], "index": (index or exact)[s]} for s in EVERY}

    def pipeline(top: FilteredTopK) -> dict:
        return {s: _rerank(top.rows[s], queries, full) for s in EVERY}

    fine = truth["cosine-256"].rows
    if storage == "sq8":
        codes = _truth_codes(collection, "cosine-64-hnsw", coarse_queries, bucket, K)
        short = _truth_codes(
            collection, "cosine-64-hnsw", coarse_queries, bucket, K * settings.factor
        )
        return {
            ("coarse", "hnsw"): pair(truth["cosine-64"].rows, codes.rows),
            ("c2f", "hnsw"): pair(fine, pipeline(short)),
        }
    pq = _truth_codes(collection, "cosine-64-pq", coarse_queries, bucket, K)
    pq_short = _truth_codes(collection, "cosine-64-pq", coarse_queries, bucket, K * settings.factor)
    sfs_pq = _truth_codes(collection, "sfs-64-pq", spaces["sfs-64"](queries), bucket, K)
    exact_c2f = pair(fine, pipeline(shortlists))
    return {
        ("coarse", "exact"): pair(truth["cosine-64"].rows),
        ("coarse", "hnsw"): pair(truth["cosine-64"].rows),
        ("coarse", "pq"): pair(truth["cosine-64"].rows, pq.rows),
        ("fine", "exact"): pair(fine),
        ("sfs", "exact"): pair(truth["sfs-64"].rows),
        ("sfs", "hnsw"): pair(truth["sfs-64"].rows),
        ("sfs", "pq"): pair(truth["sfs-64"].rows, sfs_pq.rows),
        ("c2f", "exact"): exact_c2f,
        ("c2f", "hnsw"): exact_c2f,
        ("c2f", "pq"): pair(fine, pipeline(pq_short)),
    }


def run(settings: Settings, progress: Progress) -> dict:
    faiss.omp_set_num_threads(1)
    bucket = buckets(settings.documents, settings.seed)
    matches = {s: int((bucket < round(s * BUCKETS)).sum()) for s in SELECTIVITIES}
    matches[UNFILTERED] = settings.documents
    results: dict = {"rows": [], "crossover": [], "sweep": []}
    work = Path(tempfile.mkdtemp(prefix="filters-", dir=settings.work_dir))
    try:
        path = work / "collection"
        full, queries, truth, shortlists, data, build = _import(path, settings, progress)
        progress(f"import: {build['import_per_s']:,.0f} documents/s (metadata indexed)")
        for storage, routes in LAYOUTS.items():
            started = time.perf_counter()
            with faiss_threads(settings.build_threads):
                collection = _open(path, settings, storage)
            build[f"{storage}_layout_s"] = time.perf_counter() - started
            progress(f"{storage} layout built in {build[f'{storage}_layout_s']:.0f} s")
            with collection:
                truths = _truths(collection, storage, settings, full, queries, truth, shortlists)
                stages = (
                    ("rows", "routes at every selectivity", _configs(storage, routes), queries),
                    (
                        "crossover",
                        "both paths forced",
                        _crossover(storage),
                        queries[: settings.crossover_queries],
                    ),
                    ("sweep", "efSearch sweep", _sweep(storage, settings), queries),
                )
                for key, what, configs, asked in stages:
                    progress(f"{storage}: {what}")
                    measured = {}
                    for group in _groups(configs):
                        measured |= _measure(collection, group, asked, settings, progress)
                    results[key] += [
                        _row(
                            config,
                            measured[config],
                            truths[config.route, config.kind],
                            matches[config.selectivity],
                        )
                        for config in configs
                    ]
                if storage == "flat":
                    results["resolve"] = _resolve_times(collection)
                progress.checkpoint(_report(settings, data, build, results))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _report(settings, data, build, results)


def _resolve_times(collection: Collection, repeats: int = 5) -> list[dict]:
    """Listing each filter's rows from SQLite (cache cleared) and from the cache."""
    rows = []
    for selectivity in SELECTIVITIES:
        where = bucket_filter(selectivity)
        cold, cached = [], []
        for _ in range(repeats):
            collection.clear_filter_cache()
            started = time.perf_counter()
            matching = collection.rows_matching(where)
            cold.append(time.perf_counter() - started)
            started = time.perf_counter()
            collection.rows_matching(where)
            cached.append(time.perf_counter() - started)
        rows.append(
            {
                "selectivity": selectivity,
                "matching": len(matching),
                "cold_ms": float(np.median(cold) * 1e3),
                "cached_us": float(np.median(cached) * 1e6),
            }
        )
    return rows


def equal_recall(sweep: Sequence[dict], storage: str, floor: float) -> dict:
    """The cheapest p50 index time reaching ``floor`` recall, unfiltered and at 10% (each
    against its own brute force), and their ratio."""
    points = {}
    for selectivity in (UNFILTERED, 0.1):
        rows = [
            row
            for row in sweep
            if row["storage"] == storage
            and row["selectivity"] == selectivity
            and row["recall"] >= floor
        ]
        best = min(rows, key=lambda row: row["index_p50_us"]) if rows else None
        points["unfiltered" if selectivity == UNFILTERED else "filtered"] = best and {
            key: best[key]
            for key in ("ef_search_given", "ef_search", "recall", "index_p50_us", "paths")
        }
    ratio = None
    if points["unfiltered"] and points["filtered"]:
        ratio = points["filtered"]["index_p50_us"] / points["unfiltered"]["index_p50_us"]
    return {"storage": storage, "floor": floor, **points, "ratio": ratio}


def _report(settings: Settings, data: dict, build: dict, results: dict) -> dict:
    report = {
        "machine": {"faiss_threads": 1, "build_threads": settings.build_threads or "all"},
        "data": data,
        "settings": asdict(settings),
        "policy": asdict(FilterParams())
        | {"exact_subset_rows": FilterParams().exact_subset_rows(settings.documents)},
        "build": build,
        **results,
    }
    sweep = results.get("sweep", [])
    report["equal_recall"] = [
        equal_recall(sweep, storage, floor)
        for storage in ("flat", "sq8")
        for floor in EQUAL_RECALL_FLOORS
        if any(row["storage"] == storage for row in sweep)
    ]
    return report | {"targets": targets(report)}


def targets(report: dict) -> list[dict]:
    n = report["settings"]["documents"]
    rows = report.get("rows", [])
    result = []
    for selectivity in SELECTIVITIES:
        picked = [row for row in rows if row["selectivity"] == selectivity]
        if not picked:
            continue
        worst = min(picked, key=lambda row: row["recall"])
        result.append(
            {
                "target": f"N = {n:,}, {selectivity:.1%} of documents match: recall@10 ≥ "
                f"{RECALL_TARGET} against brute-force filtered search, every route and kind",
                "reached": f"{worst['recall']:.3f} (lowest: {worst['route']} "
                f"{worst['kind']}{'-sq8' if worst['storage'] == 'sq8' else ''})",
                "met": worst["recall"] >= RECALL_TARGET,
            }
        )
    filtered = [row for row in rows if row["selectivity"] != UNFILTERED]
    if filtered:
        fraction = min(row["k_hits_fraction"] for row in filtered)
        result.append(
            {
                "target": f"N = {n:,}: k = {K} hits for every query, route, kind and selectivity "
                "(at least k documents always match)",
                "reached": fraction,
                "met": fraction == 1.0,
            }
        )
    for entry in report.get("equal_recall", []):
        storage = "float32" if entry["storage"] == "flat" else "SQ8"
        result.append(
            {
                "target": f"N = {n:,}: coarse HNSW ({storage}) p50 index time filtered at 10% / "
                f"unfiltered ≤ {RATIO_TARGET}× at equal recall@10 ≥ {entry['floor']}",
                "reached": "recall floor not reached"
                if entry["ratio"] is None
                else round(entry["ratio"], 3),
                "met": entry["ratio"] is not None and entry["ratio"] <= RATIO_TARGET,
            }
        )
    return result


# -- report -----------------------------------------------------------------------------------


def _f(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _kind(row: dict) -> str:
    return f"{row['kind']}-sq8" if row["storage"] == "sq8" else row["kind"]


def _route_table(rows: Sequence[dict]) -> str:
    unfiltered = {
        (row["route"], _kind(row)): row for row in rows if row["selectivity"] == UNFILTERED
    }
    cells = []
    for row in rows:
        base = unfiltered.get((row["route"], _kind(row)))
        ratio = (
            row["index_p50_us"] / base["index_p50_us"]
            if base and row["selectivity"] != UNFILTERED
            else None
        )
        cells.append(
            [
                row["route"],
                _kind(row),
                "unfiltered" if row["selectivity"] == UNFILTERED else f"{row['selectivity']:.1%}",
                f"{row['matching']:,}",
                ", ".join(row["paths"]) or "—",
                ", ".join(map(str, row["ef_search"])) or "—",
                f"{row['recall']:.3f}",
                f"{row['recall_exact']:.3f}",
                f"{row['k_hits_fraction']:.2f}",
                row["fallback_queries"],
                _f(row["index_p50_us"]),
                _f(row["index_p99_us"]),
                _f(row["call_p50_us"]),
                "" if ratio is None else f"{ratio:.2f}×",
            ]
        )
    return markdown_table(
        [
            "route",
            "kind",
            "filter",
            "matching",
            "path",
            "efSearch",
            "recall@10",
            "recall@10 vs exact",
            "k hits",
            "fallbacks",
            "index p50 µs",
            "index p99 µs",
            "call p50 µs",
            "p50 / unfiltered",
        ],
        cells,
    )


def _crossover_table(rows: Sequence[dict]) -> str:
    by_key = {(row["route"], _kind(row), row["selectivity"], row["mode"]): row for row in rows}
    keys = sorted(
        {(row["route"], _kind(row), row["selectivity"]) for row in rows},
        key=lambda key: (key[0], key[1], -key[2]),
    )
    cells = []
    for route, kind, selectivity in keys:
        walk = by_key[route, kind, selectivity, "selector"]
        subset = by_key[route, kind, selectivity, "exact_subset"]
        cells.append(
            [
                route,
                kind,
                f"{selectivity:.1%}",
                f"{walk['matching']:,}",
                ", ".join(map(str, walk["ef_search"])) or "—",
                f"{walk['recall']:.3f}",
                _f(walk["index_p50_us"]),
                f"{subset['recall']:.3f}",
                _f(subset["index_p50_us"]),
                "selector" if walk["index_p50_us"] < subset["index_p50_us"] else "exact subset",
            ]
        )
    return markdown_table(
        [
            "route",
            "kind",
            "filter",
            "matching",
            "selector efSearch",
            "selector recall",
            "selector p50 µs",
            "exact subset recall",
            "exact subset p50 µs",
            "faster",
        ],
        cells,
    )


def _sweep_table(rows: Sequence[dict]) -> str:
    cells = [
        [
            _kind(row),
            "unfiltered" if row["selectivity"] == UNFILTERED else f"{row['selectivity']:.0%}",
            row["ef_search_given"],
            ", ".join(map(str, row["ef_search"])) or row["ef_search_given"],
            ", ".join(row["paths"]) or "—",
            f"{row['recall']:.3f}",
            f"{row['recall_exact']:.3f}",
            _f(row["index_p50_us"]),
            _f(row["index_p99_us"]),
        ]
        for row in sorted(
            rows, key=lambda r: (r["storage"], -r["selectivity"], r["ef_search_given"])
        )
    ]
    return markdown_table(
        [
            "kind",
            "filter",
            "efSearch given",
            "efSearch used",
            "path",
            "recall@10",
            "recall@10 vs exact",
            "index p50 µs",
            "index p99 µs",
        ],
        cells,
    )


def _equal_recall_lines(entries: Sequence[dict]) -> str:
    lines = []
    for entry in entries:
        storage = "float32" if entry["storage"] == "flat" else "SQ8"
        if entry["ratio"] is None:
            lines.append(f"- {storage}, recall@10 ≥ {entry['floor']}: not reached by both")
            continue
        plain, filtered = entry["unfiltered"], entry["filtered"]
        lines.append(
            f"- {storage}, recall@10 ≥ {entry['floor']}: unfiltered efSearch "
            f"{plain['ef_search_given']} ({plain['recall']:.3f}) {plain['index_p50_us']:,.0f} µs; "
            f"filtered at 10% efSearch {filtered['ef_search_given']} → "
            f"{', '.join(map(str, filtered['ef_search']))} ({filtered['recall']:.3f}) "
            f"{filtered['index_p50_us']:,.0f} µs: **{entry['ratio']:.2f}×**"
        )
    return "\n".join(lines)


def markdown(report: dict) -> str:
    settings = report["settings"]
    n = settings["documents"]
    parts = [
        f"# Metadata filters at N = {n:,}{' (smoke run)' if report['smoke'] else ''}",
        f"Measured by `{report['command']}`. Every route searched with a `bucket < b` filter "
        "keeping 50%, 10%, 1% and 0.1% of the documents (a random permutation: the filter does "
        f"not follow the vectors), k = {K}, one query per call on one FAISS thread, "
        f"{settings['queries']:,} real held-out queries, the configurations of one route and "
        "kind interleaved query by query. recall@10 is against brute-force filtered search "
        "scored the way the path scores (exact; the index path over PQ / SQ8 codes: brute force "
        "over those codes, and 'vs exact' beside it); C2F's brute force is its pipeline over "
        "the matching documents. *Index* time leaves out listing the filter's rows (cached "
        "after the first query; timed apart below) and reading the hits' ids; *call* time is "
        "the whole collection call. p99 includes time the process was descheduled on this "
        "shared machine.",
        "## Targets\n\n"
        + targets_table(report["targets"]),
        "## Equal recall: coarse HNSW at 10% against unfiltered\n\n"
        "Each side's cheapest efSearch (filtered: the efSearch given, raised by the policy to "
        "`ef / √0.1`) reaching the floor, each against its own brute force.\n\n"
        + _equal_recall_lines(report.get("equal_recall", [])),
        "## Every route and kind\n\n"
        f"The policy (`FilterParams` defaults): exact subset up to "
        f"{report['policy']['exact_subset_rows']:,} matching documents at this N, else the "
        "selector.\n\n" + _route_table(report.get("rows", [])),
        "## Both paths forced (the crossover)\n\n"
        f"{settings['crossover_queries']} queries per cell.\n\n"
        + _crossover_table(report.get("crossover", [])),
        "## efSearch sweep\n\n" + _sweep_table(report.get("sweep", [])),
        "## Listing a filter's rows (SQLite, metadata index)\n\n"
        + markdown_table(
            ["filter", "matching", "cold ms (median of 5)", "cached µs"],
            [
                [
                    f"{row['selectivity']:.1%}",
                    f"{row['matching']:,}",
                    _f(row["cold_ms"], 2),
                    _f(row["cached_us"], 1),
                ]
                for row in report.get("resolve", [])
            ],
        ),
        "## Build\n\n" + bullet_list(report["build"]),
        "## Data\n\n" + bullet_list(report["data"]),
        "## Parameters\n\n" + bullet_list(settings | {"policy": report["policy"]}),
        "## Machine\n\n" + bullet_list(report["machine"]),
    ]
    return "\n\n".join(parts)


def plot(report: dict, path: Path) -> None:
    figure = Figure(figsize=(16, 5))
    sweep_axis, crossover_axis, route_axis = figure.subplots(1, 3)
    for storage, color in (("flat", "C0"), ("sq8", "C1")):
        for selectivity, style in ((UNFILTERED, "-"), (0.1, "--")):
            rows = sorted(
                (
                    row
                    for row in report.get("sweep", [])
                    if row["storage"] == storage and row["selectivity"] == selectivity
                ),
                key=lambda row: row["ef_search_given"],
            )
            if rows:
                label = "unfiltered" if selectivity == UNFILTERED else "10% match"
                sweep_axis.plot(
                    [row["index_p50_us"] for row in rows],
                    [row["recall"] for row in rows],
                    style,
                    marker="o",
                    color=color,
                    label=f"{'float32' if storage == 'flat' else 'SQ8'}, {label}",
                )
    sweep_axis.set(
        xscale="log",
        xlabel="p50 index time (µs)",
        ylabel="recall@10",
        title="Coarse HNSW: efSearch sweep",
    )
    sweep_axis.legend()
    for (route, mode), style in {
        ("coarse", "selector"): "o-",
        ("coarse", "exact_subset"): "s--",
        ("c2f", "selector"): "o-",
        ("c2f", "exact_subset"): "s--",
    }.items():
        rows = sorted(
            (
                row
                for row in report.get("crossover", [])
                if row["route"] == route and row["mode"] == mode and row["storage"] == "flat"
            ),
            key=lambda row: row["selectivity"],
        )
        if rows:
            crossover_axis.plot(
                [row["selectivity"] for row in rows],
                [row["index_p50_us"] for row in rows],
                style,
                color="C0" if route == "coarse" else "C2",
                label=f"{route} HNSW, {mode.replace('_', ' ')}",
            )
    crossover_axis.set(
        xscale="log",
        yscale="log",
        xlabel="share of documents matching",
        ylabel="p50 index time (µs)",
        title="Selector against exact subset",
    )
    crossover_axis.legend()
    names = sorted({(row["route"], _kind(row)) for row in report.get("rows", [])})
    for position, (route, kind) in enumerate(names):
        rows = sorted(
            (r for r in report["rows"] if (r["route"], _kind(r)) == (route, kind)),
            key=lambda r: -r["selectivity"],
        )
        route_axis.plot(
            range(len(rows)),
            [row["index_p50_us"] for row in rows],
            "o-",
            color=f"C{position % 10}",
            label=f"{route} {kind}",
        )
    route_axis.set_xticks(range(1 + len(SELECTIVITIES)))
    route_axis.set_xticklabels(["none", *(f"{s:.1%}" for s in SELECTIVITIES)])
    route_axis.set(
        yscale="log",
        xlabel="filter (share matching)",
        ylabel="p50 index time (µs)",
        title="Every route, the policy's path",
    )
    route_axis.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
