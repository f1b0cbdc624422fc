"""Millions of documents on one machine: the tiered C2F collection against a plain HNSW-256.

    python -m benchmarks scale --work-dir /data/scale          # N = 1M, 3M, 10M (hours)
    python -m benchmarks scale --sizes 100000 --out /tmp/scale  # a dry run
    python -m benchmarks scale --smoke --out DIR                # seconds: toy vectors

Vectors come from a labelled mixture fitted to the real V5 embeddings
(:mod:`benchmarks.harness.labelled_mixture`: one component per CLINC-150 / Banking77 intent, with
a low-rank-plus-diagonal covariance, and k-means components for the unlabelled sentences), so
every synthetic document has an intent and a domain. The queries are real: held-out CLINC-150
test texts embedded by the same V5 head. First, at the real set's size, the synthetic vectors are
checked against the real ones (HNSW recall against efSearch at 64 and 256-d, latency, and the
same-domain / same-intent precision of exact search). Then, per N, the vectors are streamed
chunk by chunk (never all in memory) into

- the **tiered collection** (:class:`index.Collection`): the SQLite store of record and the full
  unit vectors in a memory-mapped file, imported with no index; then an HNSW graph at 64-d is
  built from the file (a reopen with the layout ``{64: hnsw, 256: none}``). Coarse queries search
  the 64-d graph (efSearch sweep); fine queries go through C2F (``search_c2f``: shortlist k′ at
  64-d, exact re-rank from the file; k′ sweep);
- the **baseline** a user would otherwise run: a FAISS ``IndexHNSWFlat(256, M,
  METRIC_INNER_PRODUCT)`` over the same unit vectors, in RAM (efSearch sweep), unless FAISS's own
  size accounting puts it over the memory budget or its estimated build time over the limit;
- the exact top-10 at 256-d and at 64-d (blocked products over each chunk, a running top-k).

Per N and route: import rate (vectors/s before the graph build) and graph build time; anonymous
RSS per document (``RssAnon`` of a fresh process that only opens the folder or index file, then
runs the queries, minus its ``RssAnon`` before opening), bytes on disk per document, restart time
(that open); p50/p99 single-query index time (1 thread, round-robin over every route and setting);
recall@10 against exact search (C2F and HNSW-256 against exact 256-d, coarse against exact 64-d);
and task quality: same-domain precision@10 for coarse, same-intent precision@10 for C2F and
HNSW-256, each beside exact 256-d search's on the same queries. Operating points are the
smallest efSearch / k′ reaching the bar. Writes ``scale{,_smoke}.{json,md,png}``; an interrupted
run keeps every N it finished (checkpoints).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import faiss
import numpy as np
from matplotlib.figure import Figure

from benchmarks.harness.labelled_mixture import (
    LabelledMixture,
    LabelledReal,
    LabelledVectors,
    labelled_real,
    toy_labelled,
)
from benchmarks.harness.markdown import bullet_list, markdown_table
from benchmarks.harness.restart_probe import probe
from benchmarks.harness.runner import Progress, option
from benchmarks.harness.search_measure import Case, Search, first_reaching, measure, recall_at_k
from index import Collection, Hit, HnswParams
from index.vectors import prefix_unit, unit_rows

K = 10
TARGETS = {
    "c2f_recall": 0.95,
    "ram_ratio": 3.0,
    "c2f_p50_ratio": 2.0,
    "coarse_p50_ratio": 3.7,
    "rss_bytes_per_doc": 600,
    "import_per_s": 20_000,
    "build_minutes": 45,
    "restart_s": 60,
}


@dataclass(frozen=True)
class Settings:
    """Every parameter of a run."""

    sizes: tuple[int, ...] = option((1_000_000, 3_000_000, 10_000_000), "corpus sizes N")
    queries: int = option(1000, "held-out CLINC-150 test texts used as queries")
    storage: str = option("sq8", "storage of the collection's 64-d HNSW graph: flat or sq8")
    m: int = option(32, "HNSW degree M (collection and baseline)")
    ef_construction: int = option(100, "HNSW efConstruction (collection and baseline)")
    ef_values: tuple[int, ...] = option(
        (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512), "efSearch sweep (coarse, HNSW-256)"
    )
    factors: tuple[int, ...] = option(
        (1, 2, 4, 8, 16, 32, 64, 128), "C2F sweep: shortlist k′ = 10 × factor"
    )
    c2f_min_ef: int = option(32, "C2F shortlist efSearch: max(this, k′)")
    full_dtype: str = option("float16", "the collection's full-vector file: float16 or float32")
    rank: int = option(8, "rank of each mixture component's covariance (plus a diagonal)")
    unlabelled_components: int = option(64, "k-means components for the unlabelled sentences")
    baseline_memory_gb: float = option(
        12.0,
        "largest HNSW-256 baseline built, by FAISS's size accounting (GB); the rest of the "
        "box holds the collection and the page cache",
    )
    baseline_max_build_minutes: float = option(
        120.0, "largest estimated HNSW-256 build time (from the previous N) that is attempted"
    )
    build_threads: int = option(0, "FAISS threads for graph builds and exact search (0: all)")
    rounds: int = option(3, "round-robin latency rounds")
    work_dir: Path | None = option(
        None,
        "folder for the collections and index files, kept (default: a temporary folder, "
        "removed); the real V5 embeddings are cached there",
    )
    coarse_dim: int = 64
    dim: int = 256
    chunk: int = 100_000
    import_batch: int = 10_000
    recall_target: float = 0.95
    precision_tolerance: float = 0.005
    fidelity: bool = True
    seed: int = 0
    toy_vectors: bool = False
    """Toy labelled vectors stand in for the V5 embeddings (no encoder, no head)."""
    toy_count: int = 6000


SMOKE = Settings(
    sizes=(20_000,),
    queries=200,
    ef_values=(16, 32, 64, 128),
    factors=(1, 2, 4, 8),
    ef_construction=40,
    unlabelled_components=4,
    rounds=1,
    chunk=5000,
    import_batch=2500,
    toy_vectors=True,
)


# -- data -------------------------------------------------------------------------------------


def _real(settings: Settings, work: Path, progress: Progress) -> LabelledReal:
    """The labelled real set (toy vectors in a smoke run), cached in the work folder."""
    if settings.toy_vectors:
        toy = toy_labelled(settings.toy_count + 2 * settings.queries, settings.dim, settings.seed)
        labelled = np.flatnonzero(toy.intents >= 0)[: settings.queries]
        base = toy.take(np.setdiff1d(np.arange(len(toy)), labelled))
        queries = toy.take(labelled)
        names = tuple(map(str, range(48))), tuple(map(str, range(8)))
        return LabelledReal(base, queries, *names, {"vectors": "toy labelled vectors"})
    cache = work / f"real_v5_q{settings.queries}_s{settings.seed}.npz"
    if cache.is_file():
        saved = np.load(cache)
        parts = [
            LabelledVectors(
                saved[f"{part}_vectors"], saved[f"{part}_intents"], saved[f"{part}_domains"]
            )
            for part in ("base", "queries")
        ]
        names = json.loads(str(saved["names"]))
        return LabelledReal(
            *parts, tuple(names[0]), tuple(names[1]), json.loads(str(saved["description"]))
        )
    from training.data.registry import data_dir

    progress("embedding the real sentences with a V5 head (minutes)")
    real = labelled_real(data_dir(), settings.queries, settings.seed, progress.enabled)
    np.savez(
        cache,
        **{
            f"{part}_{field}": getattr(getattr(real, part), field)
            for part in ("base", "queries")
            for field in ("vectors", "intents", "domains")
        },
        names=json.dumps([real.intent_names, real.domain_names]),
        description=json.dumps(real.description, default=str),
    )
    return real


def hnsw_storage(settings: Settings) -> tuple[HnswParams, str]:
    """The collection's HNSW parameters, and the storage they give: ``settings.storage`` where
    :class:`HnswParams` has a ``storage`` field, ``flat`` (its only storage) where it has not."""
    params = HnswParams(m=settings.m, ef_construction=settings.ef_construction)
    if "storage" in {item.name for item in fields(HnswParams)}:
        return replace(params, storage=settings.storage), settings.storage  # type: ignore[call-arg]
    return params, "flat"


# -- search helpers ---------------------------------------------------------------------------


class RunningTopK:
    """The exact top-``k`` inner products of fixed queries over a base seen block by block."""

    def __init__(self, queries: np.ndarray, k: int = K) -> None:
        self.queries = np.ascontiguousarray(queries, np.float32)
        self.scores = np.full((len(queries), k), -np.inf, np.float32)
        self.ids = np.full((len(queries), k), -1, np.int64)

    def add(self, block: np.ndarray, offset: int) -> None:
        k = self.ids.shape[1]
        scores, ids = faiss.knn(
            self.queries,
            np.ascontiguousarray(block),
            min(k, len(block)),
            metric=faiss.METRIC_INNER_PRODUCT,
        )
        merged_scores = np.hstack([self.scores, scores])
        merged_ids = np.hstack([self.ids, ids + offset])
        best = np.argsort(-merged_scores, axis=1, kind="stable")[:, :k]
        self.scores = np.take_along_axis(merged_scores, best, axis=1)
        self.ids = np.take_along_axis(merged_ids, best, axis=1)


def precision_at_k(found: np.ndarray, base_labels: np.ndarray, query_labels: np.ndarray) -> float:
    """Mean over queries of the share of the top ``K`` whose label is the query's (a missing
    result, -1, or an unlabelled document counts as a miss)."""
    found = found[:, :K]
    labels = np.where(found >= 0, base_labels[np.maximum(found, 0)], -2)
    return float((labels == query_labels[:, None]).sum(axis=1).mean()) / K


def task_quality(found: np.ndarray, base: LabelledVectors, queries: LabelledVectors) -> dict:
    return {
        "domain_p10": precision_at_k(found, base.domains, queries.domains),
        "intent_p10": precision_at_k(found, base.intents, queries.intents),
    }


def hnsw_graph(dim: int, settings: Settings) -> faiss.IndexHNSWFlat:
    """An empty inner-product ``IndexHNSWFlat`` with the run's M and efConstruction."""
    graph = faiss.IndexHNSWFlat(dim, settings.m, faiss.METRIC_INNER_PRODUCT)
    graph.hnsw.efConstruction = settings.ef_construction
    return graph


def graph_search(graph: faiss.Index, ef_search: int) -> Search:
    params = faiss.SearchParametersHNSW()
    params.efSearch = ef_search
    return lambda queries: graph.search(queries, K, params=params)


def hnsw_bytes_per_vector(dim: int, m: int) -> float:
    """FAISS's accounting of an ``IndexHNSWFlat``: the float32 code, the expected neighbour
    slots over the levels FAISS draws (``assign_probas``, ``cum_nneighbor_per_level``), and
    the per-vector offset and level."""
    graph = faiss.IndexHNSWFlat(dim, m)  # kept alive: ``hnsw`` points into it
    hnsw = graph.hnsw
    probas = faiss.vector_to_array(hnsw.assign_probas)
    slots = faiss.vector_to_array(hnsw.cum_nneighbor_per_level)
    neighbours = sum(p * slots[level + 1] for level, p in enumerate(probas))
    return 4 * dim + 4 * neighbours + 8 + 4


def _ids(hits: list[list[Hit]]) -> np.ndarray:
    """A ``(queries, K)`` id matrix (-1 where fewer hits came back) from a collection search."""
    found = np.full((len(hits), K), -1, np.int64)
    for row, query_hits in enumerate(hits):
        found[row, : len(query_hits)] = [int(hit.id) for hit in query_hits]
    return found


def _graph_index(collection: Collection, dim: int) -> object:
    """The collection's HNSW index at ``dim``; the sweeps set its ``params.ef_search``, as the
    collection has no per-search efSearch."""
    return collection._indexes[f"cosine-{dim}-hnsw"]  # noqa: SLF001


def _folder_bytes(path: Path) -> dict:
    """Apparent and allocated bytes of every file under ``path`` (sparse tails count only in
    the first)."""
    files = [item.stat() for item in path.rglob("*") if item.is_file()]
    return {
        "apparent": sum(item.st_size for item in files),
        "allocated": sum(item.st_blocks * 512 for item in files),
    }


@contextmanager
def _threads(count: int) -> Iterator[None]:
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(count or os.cpu_count() or 1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


# -- fidelity ---------------------------------------------------------------------------------


def fidelity(
    real: LabelledReal, mixture: LabelledMixture, settings: Settings, progress: Progress
) -> dict:
    """Real base vectors against as many synthetic draws, with the same real queries: HNSW
    recall@10 per efSearch at both dims, single-query latency, and exact search's precision."""
    synthetic = mixture.sample(len(real.base), settings.seed + 1, settings.chunk)
    sets = {"real": real.base, "synthetic": synthetic}
    rows, exact, cases = [], [], {}
    for name, labelled in sets.items():
        for dim in (settings.coarse_dim, settings.dim):
            progress(f"fidelity: {name}, {dim}-d HNSW over {len(labelled):,} vectors")
            base = prefix_unit(labelled.vectors, dim)
            queries = prefix_unit(real.queries.vectors, dim)
            truth = RunningTopK(queries)
            truth.add(base, 0)
            exact.append(
                {"set": name, "dim": dim, **task_quality(truth.ids, labelled, real.queries)}
            )
            with _threads(settings.build_threads):
                graph = hnsw_graph(dim, settings)
                graph.add(base)
            for ef in settings.ef_values:
                search = graph_search(graph, ef)
                cases[f"{name}/{dim}/{ef}"] = Case(search, queries)
                recall = recall_at_k(search(queries)[1], truth.ids, K)
                rows.append({"set": name, "dim": dim, "ef_search": ef, "recall_at_10": recall})
    progress("fidelity: latency, round-robin")
    latencies = measure(cases, settings.rounds)
    rows = [
        row | latencies[f"{row['set']}/{row['dim']}/{row['ef_search']}"].to_json() for row in rows
    ]
    by_key = {(row["set"], row["dim"], row["ef_search"]): row for row in rows}
    closeness = []
    for dim in (settings.coarse_dim, settings.dim):
        pairs = [
            (by_key["real", dim, ef], by_key["synthetic", dim, ef]) for ef in settings.ef_values
        ]
        closeness.append(
            {
                "dim": dim,
                "max_abs_recall_difference": max(
                    abs(a["recall_at_10"] - b["recall_at_10"]) for a, b in pairs
                ),
                "mean_recall_difference": float(
                    np.mean([b["recall_at_10"] - a["recall_at_10"] for a, b in pairs])
                ),
                "median_p50_ratio_synthetic_to_real": float(
                    np.median([b["p50_us"] / a["p50_us"] for a, b in pairs])
                ),
            }
        )
    return {"n": len(real.base), "rows": rows, "exact": exact, "closeness": closeness}


# -- one corpus size --------------------------------------------------------------------------


def baseline_plan(n: int, settings: Settings, built: Sequence[tuple[int, float]]) -> dict:
    """Whether to build the HNSW-256 baseline at ``n``: its size by FAISS's accounting against
    the memory budget, its build time estimated from the largest one built (× N log N)."""
    per_vector = hnsw_bytes_per_vector(settings.dim, settings.m)
    plan: dict = {
        "bytes_per_vector": per_vector,
        "bytes": per_vector * n,
        "estimated_build_s": None,
    }
    reasons = []
    if plan["bytes"] > settings.baseline_memory_gb * 1e9:
        reasons.append(
            f"needs {plan['bytes'] / 1e9:.1f} GB by FAISS's accounting, over the "
            f"{settings.baseline_memory_gb:g} GB budget"
        )
    if built:
        done_n, done_s = built[-1]
        plan["estimated_build_s"] = done_s * n / done_n * math.log(n) / math.log(done_n)
        if plan["estimated_build_s"] > 60 * settings.baseline_max_build_minutes:
            reasons.append(
                f"its build would take about {plan['estimated_build_s'] / 60:.0f} min, over "
                f"the {settings.baseline_max_build_minutes:g} min limit"
            )
    return plan | {"built": not reasons, "skipped_because": "; ".join(reasons) or None}


def _collection(path: Path, settings: Settings, graph: bool) -> Collection:
    """The tiered collection: with ``graph``, an HNSW graph at the coarse dim; else no index."""
    params, _ = hnsw_storage(settings)
    return Collection(
        path,
        settings.dim,
        (settings.coarse_dim, settings.dim),
        index_kinds=("hnsw",),
        hnsw=params,
        full_dtype=settings.full_dtype,
        layout={settings.coarse_dim: ("hnsw",) if graph else (), settings.dim: ()},
    )


def _probe_spec(path: Path, settings: Settings, queries: Path) -> dict:
    params, _ = hnsw_storage(settings)
    return {
        "kind": "collection",
        "path": str(path),
        "dim": settings.dim,
        "prefix_dims": [settings.coarse_dim, settings.dim],
        "hnsw": asdict(params),
        "layout": {settings.coarse_dim: ["hnsw"], settings.dim: []},
        "full_dtype": settings.full_dtype,
        "queries": str(queries),
        "searches": [
            {"dim": settings.coarse_dim, "kind": "hnsw"},
            {"coarse_dim": settings.coarse_dim, "factor": max(settings.factors)},
        ],
    }


def _memory(report: dict, n: int) -> dict:
    """A probe's report with its bytes per document."""
    added = report["rss_anon_searched_bytes"] - report["rss_anon_before_bytes"]
    opened = report["rss_anon_opened_bytes"] - report["rss_anon_before_bytes"]
    return report | {"rss_anon_per_doc": added / n, "rss_anon_opened_per_doc": opened / n}


def import_and_build(
    n: int,
    folder: Path,
    mixture: LabelledMixture,
    queries: LabelledVectors,
    settings: Settings,
    plan: dict,
    progress: Progress,
) -> tuple[dict, LabelledVectors, dict]:
    """Stream ``n`` draws into the collection (no index), the baseline (when planned) and the
    exact top-k; then build the collection's graph. Timings, the labels, and the exact ids."""
    labels = LabelledVectors(np.empty(0), np.empty(n, np.int32), np.empty(n, np.int32))
    truth = {
        "256": RunningTopK(unit_rows(queries.vectors)),
        "64": RunningTopK(prefix_unit(queries.vectors, settings.coarse_dim)),
    }
    seconds = dict.fromkeys(("generate", "import", "exact", "baseline_build"), 0.0)
    baseline = hnsw_graph(settings.dim, settings) if plan["built"] else None
    path = folder / "collection"
    with _threads(settings.build_threads), _collection(path, settings, graph=False) as collection:
        started = time.perf_counter()
        for index, part in enumerate(mixture.chunks(n, settings.seed + n, settings.chunk)):
            seconds["generate"] += time.perf_counter() - started
            offset = index * settings.chunk
            labels.intents[offset : offset + len(part)] = part.intents
            labels.domains[offset : offset + len(part)] = part.domains
            unit = unit_rows(part.vectors)
            started = time.perf_counter()
            truth["256"].add(unit, offset)
            truth["64"].add(prefix_unit(unit, settings.coarse_dim), offset)
            seconds["exact"] += time.perf_counter() - started
            started = time.perf_counter()
            for start in range(0, len(part), settings.import_batch):
                rows = unit[start : start + settings.import_batch]
                ids = [str(offset + start + i) for i in range(len(rows))]
                collection.upsert(ids, [""] * len(rows), rows)
            seconds["import"] += time.perf_counter() - started
            if baseline is not None:
                started = time.perf_counter()
                baseline.add(unit)
                seconds["baseline_build"] += time.perf_counter() - started
            done = offset + len(part)
            if done == n or index % max(1, n // settings.chunk // 10) == 0:
                progress(
                    f"N={n:,}: {done:,} streamed; import {done / seconds['import']:,.0f}/s"
                    + (f", HNSW-256 {done / seconds['baseline_build']:,.0f}/s" if baseline else "")
                )
            started = time.perf_counter()
        started = time.perf_counter()
        collection.snapshot()
        seconds["import_snapshot"] = time.perf_counter() - started
        progress(f"N={n:,}: building the {settings.coarse_dim}-d graph from the vector file")
        started = time.perf_counter()
        with _collection(path, settings, graph=True) as built:
            seconds["graph_build"] = time.perf_counter() - started
            started = time.perf_counter()
            built.snapshot()
            seconds["graph_snapshot"] = time.perf_counter() - started
            stats = built.stats()
    if baseline is not None:
        faiss.write_index(baseline, str(folder / "hnsw256.faiss"))
        del baseline
    timings = seconds | {
        "import_per_s": n / seconds["import"],
        "import_with_snapshot_per_s": n / (seconds["import"] + seconds["import_snapshot"]),
        "collection_total_s": sum(
            seconds[key] for key in ("import", "import_snapshot", "graph_build", "graph_snapshot")
        ),
        "collection_indexes": stats.indexes,
        "build_recovery": stats.recovery,
    }
    return timings, labels, {dim: topk.ids for dim, topk in truth.items()}


def _percentiles(seconds: Sequence[float]) -> dict:
    micro = 1e6 * np.asarray(seconds)
    return {
        "index_p50_us": float(np.percentile(micro, 50)),
        "index_p99_us": float(np.percentile(micro, 99)),
    }


def sweeps(
    folder: Path,
    queries: LabelledVectors,
    labels: LabelledVectors,
    truth: dict,
    settings: Settings,
    baseline_built: bool,
    progress: Progress,
) -> list[dict]:
    """Every route and setting: recall and task quality (all queries at once), then latency in
    one round-robin. ``p50_us`` / ``p99_us`` time the call a service makes (the collection's
    ``search`` / ``search_c2f``, ids read from SQLite included); ``index_p50_us`` /
    ``index_p99_us`` the index work alone: the 64-d graph's search for coarse, the shortlist
    plus the re-rank for C2F (the collection's own ``timings``), the bare FAISS search for
    HNSW-256."""
    rows, cases = [], {}
    full_queries = np.ascontiguousarray(queries.vectors, np.float32)
    unit_queries = unit_rows(full_queries)
    coarse_queries = prefix_unit(full_queries, settings.coarse_dim)
    c2f_seconds: dict[int, list[float]] = {factor: [] for factor in settings.factors}
    with _collection(folder / "collection", settings, graph=True) as collection:
        graph = _graph_index(collection, settings.coarse_dim)
        base_params = graph.params  # type: ignore[attr-defined]

        def coarse(query: np.ndarray, params: HnswParams) -> list[list[Hit]]:
            graph.params = params  # type: ignore[attr-defined]
            return collection.search(query, K, settings.coarse_dim, kind="hnsw")

        def coarse_index(query: np.ndarray, params: HnswParams) -> object:
            graph.params = params  # type: ignore[attr-defined]
            return graph.search(query, K)  # type: ignore[attr-defined]

        def c2f(query: np.ndarray, params: HnswParams, factor: int) -> list[list[Hit]]:
            graph.params = params  # type: ignore[attr-defined]
            timings: dict[str, float] = {}
            hits = collection.search_c2f(
                query, K, settings.coarse_dim, factor, kind="hnsw", timings=timings
            )
            if len(query) == 1:
                c2f_seconds[factor].append(timings["shortlist"] + timings["rerank"])
            return hits

        for ef in settings.ef_values:
            params = replace(base_params, ef_search=ef)
            search: Search = lambda query, params=params: coarse(query, params)  # noqa: E731
            cases[f"coarse/{ef}"] = Case(search, full_queries)
            cases[f"coarse-index/{ef}"] = Case(
                lambda query, params=params: coarse_index(query, params), coarse_queries
            )
            found = _ids(search(full_queries))
            rows.append(
                {
                    "route": "coarse",
                    "ef_search": ef,
                    "recall_at_10": recall_at_k(found, truth["64"], K),
                    "recall_at_10_vs_256": recall_at_k(found, truth["256"], K),
                    **task_quality(found, labels, queries),
                }
            )
        for factor in settings.factors:
            ef = max(settings.c2f_min_ef, K * factor)
            params = replace(base_params, ef_search=ef)
            search = lambda query, params=params, factor=factor: c2f(query, params, factor)  # noqa: E731
            cases[f"c2f/{factor}"] = Case(search, full_queries)
            found = _ids(search(full_queries))
            rows.append(
                {
                    "route": "c2f",
                    "factor": factor,
                    "shortlist": K * factor,
                    "ef_search": ef,
                    "recall_at_10": recall_at_k(found, truth["256"], K),
                    **task_quality(found, labels, queries),
                }
            )
        baseline = faiss.read_index(str(folder / "hnsw256.faiss")) if baseline_built else None
        if baseline is not None:
            for ef in settings.ef_values:
                search = graph_search(baseline, ef)
                cases[f"hnsw256/{ef}"] = Case(search, unit_queries)
                found = search(unit_queries)[1]
                rows.append(
                    {
                        "route": "hnsw256",
                        "ef_search": ef,
                        "recall_at_10": recall_at_k(found, truth["256"], K),
                        **task_quality(found, labels, queries),
                    }
                )
        progress(f"N={len(labels.intents):,}: latency of {len(cases)} cases, round-robin")
        for spent in c2f_seconds.values():
            spent.clear()
        latencies = {
            name: value.to_json() for name, value in measure(cases, settings.rounds).items()
        }
        del baseline
    for row in rows:
        route = row["route"]
        if route == "coarse":
            index = latencies[f"coarse-index/{row['ef_search']}"]
            row |= latencies[f"coarse/{row['ef_search']}"] | {
                "index_p50_us": index["p50_us"],
                "index_p99_us": index["p99_us"],
            }
        elif route == "c2f":
            # The first timing of each factor is measure's untimed warm-up query.
            row |= latencies[f"c2f/{row['factor']}"] | _percentiles(c2f_seconds[row["factor"]][1:])
        else:
            latency = latencies[f"hnsw256/{row['ef_search']}"]
            row |= latency | {"index_p50_us": latency["p50_us"], "index_p99_us": latency["p99_us"]}
    return rows


def operating_points(size: dict, settings: Settings) -> dict:
    """The cheapest setting per route reaching each bar, and the ratios between routes."""
    by_route: dict[str, list[dict]] = {"coarse": [], "c2f": [], "hnsw256": []}
    for row in size["sweeps"]:
        by_route[row["route"]].append(row)
    exact_domain = size["exact"]["256"]["domain_p10"]
    domain_bar = exact_domain - settings.precision_tolerance
    points: dict = {
        "recall_bar": settings.recall_target,
        "domain_precision_bar": domain_bar,
        "c2f": first_reaching(by_route["c2f"], settings.recall_target, "factor"),
        "hnsw256_at_recall": first_reaching(
            by_route["hnsw256"], settings.recall_target, "ef_search"
        ),
        "coarse": first_reaching(by_route["coarse"], domain_bar, "ef_search", "domain_p10"),
        "hnsw256_at_domain_precision": first_reaching(
            by_route["hnsw256"], domain_bar, "ef_search", "domain_p10"
        ),
    }
    memory = size["memory"]
    if points["c2f"] and points["hnsw256_at_recall"]:
        points["c2f_p50_ratio"] = (
            points["hnsw256_at_recall"]["index_p50_us"] / points["c2f"]["index_p50_us"]
        )
    if memory.get("hnsw256"):
        points["ram_ratio"] = (
            memory["hnsw256"]["rss_anon_per_doc"] / memory["collection"]["rss_anon_per_doc"]
        )
    if points["coarse"] and points["hnsw256_at_domain_precision"]:
        points["coarse_p50_ratio"] = (
            points["hnsw256_at_domain_precision"]["index_p50_us"] / points["coarse"]["index_p50_us"]
        )
    return points


def measure_size(
    n: int,
    work: Path,
    mixture: LabelledMixture,
    queries: LabelledVectors,
    settings: Settings,
    plan: dict,
    progress: Progress,
) -> dict:
    folder = work / f"n{n}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    timings, labels, truth = import_and_build(n, folder, mixture, queries, settings, plan, progress)
    np.save(folder / "queries.npy", queries.vectors.astype(np.float32))
    np.save(folder / "queries_unit.npy", unit_rows(queries.vectors))
    progress(f"N={n:,}: restart in a fresh process")
    memory: dict = {
        "collection": _memory(
            probe(_probe_spec(folder / "collection", settings, folder / "queries.npy")), n
        )
    }
    disk = {"collection": _folder_bytes(folder / "collection")}
    if plan["built"]:
        memory["hnsw256"] = _memory(
            probe(
                {
                    "kind": "faiss",
                    "path": str(folder / "hnsw256.faiss"),
                    "queries": str(folder / "queries_unit.npy"),
                    "ef_search": 128,
                }
            ),
            n,
        )
        stat = (folder / "hnsw256.faiss").stat()
        disk["hnsw256"] = {"apparent": stat.st_size, "allocated": stat.st_blocks * 512}
    exact = {
        "256": task_quality(truth["256"], labels, queries),
        "64": task_quality(truth["64"], labels, queries),
    }
    rows = sweeps(folder, queries, labels, truth, settings, plan["built"], progress)
    size = {
        "n": n,
        "timings": timings,
        "memory": memory,
        "disk": disk,
        "exact": exact,
        "baseline": plan,
        "sweeps": rows,
    }
    return size | {"points": operating_points(size, settings)}


# -- run --------------------------------------------------------------------------------------


def targets(sizes: Sequence[dict]) -> list[dict]:
    """The issue's targets: at the largest N for the collection's own figures, at the largest N
    with a baseline for the comparisons."""
    if not sizes:
        return []
    largest = sizes[-1]
    n = f"N = {largest['n']:,}"
    result = []
    compared = [size for size in sizes if size["baseline"]["built"]]
    if compared:
        size = compared[-1]
        points, at = size["points"], f"N = {size['n']:,}"
        c2f = points["c2f"]
        best = max(row["recall_at_10"] for row in size["sweeps"] if row["route"] == "c2f")
        result.append(
            {
                "target": f"{at}: C2F recall@10 ≥ {TARGETS['c2f_recall']} against exact 256-d",
                "reached": c2f["recall_at_10"] if c2f else best,
                "met": c2f is not None,
            }
        )
        for key, what in (
            (
                "ram_ratio",
                f"{at}: HNSW-256 anonymous RAM / C2F collection's ≥ {TARGETS['ram_ratio']}×",
            ),
            (
                "c2f_p50_ratio",
                f"{at}: HNSW-256 / C2F index p50 at recall@10 ≥ 0.95 ≥ {TARGETS['c2f_p50_ratio']}×",
            ),
            (
                "coarse_p50_ratio",
                f"{at}: HNSW-256 / coarse index p50 at equal same-domain P@10 "
                f"≥ {TARGETS['coarse_p50_ratio']}×",
            ),
        ):
            value = points.get(key)
            target_value = TARGETS[key]
            result.append(
                {
                    "target": what,
                    "reached": "bar not reached" if value is None else value,
                    "met": value is not None and value >= target_value,
                }
            )
    per_doc = largest["memory"]["collection"]["rss_anon_per_doc"]
    timings = largest["timings"]
    minutes = timings["collection_total_s"] / 60
    restart = largest["memory"]["collection"]["open_seconds"]
    result += [
        {
            "target": f"{n}: anonymous RSS ≤ {TARGETS['rss_bytes_per_doc']} B per document",
            "reached": per_doc,
            "met": per_doc <= TARGETS["rss_bytes_per_doc"],
        },
        {
            "target": f"{n}: import ≥ {TARGETS['import_per_s']:,} vectors/s before the graph build",
            "reached": timings["import_per_s"],
            "met": timings["import_per_s"] >= TARGETS["import_per_s"],
        },
        {
            "target": f"{n}: built (import, graph, snapshots) in ≤ {TARGETS['build_minutes']} min",
            "reached": minutes,
            "met": minutes <= TARGETS["build_minutes"],
        },
        {
            "target": f"{n}: restart ≤ {TARGETS['restart_s']} s",
            "reached": restart,
            "met": restart <= TARGETS["restart_s"],
        },
    ]
    return result


@contextmanager
def _work_folder(settings: Settings) -> Iterator[Path]:
    if settings.work_dir is not None:
        settings.work_dir.mkdir(parents=True, exist_ok=True)
        yield settings.work_dir
        return
    with tempfile.TemporaryDirectory(prefix="fractal-scale-") as folder:
        yield Path(folder)


def run(settings: Settings, progress: Progress) -> dict:
    _, storage = hnsw_storage(settings)
    results: dict = {
        "machine": {"faiss_threads": 1, "build_threads": settings.build_threads or os.cpu_count()},
        "settings": asdict(settings) | {"storage_used": storage},
        "sizes": [],
    }
    with _work_folder(settings) as work, _threads(1):
        real = _real(settings, work, progress)
        progress(f"fitting the labelled mixture to {len(real.base):,} real vectors")
        mixture = LabelledMixture.fit(
            real.base, settings.rank, settings.unlabelled_components, settings.seed
        )
        results["data"] = real.description | {"mixture": mixture.describe()}
        if settings.fidelity:
            results["fidelity"] = fidelity(real, mixture, settings, progress)
        built: list[tuple[int, float]] = []
        for n in sorted(settings.sizes):
            plan = baseline_plan(n, settings, built)
            size = measure_size(n, work, mixture, real.queries, settings, plan, progress)
            if plan["built"]:
                built.append((n, size["timings"]["baseline_build"]))
            results["sizes"].append(size)
            results["targets"] = targets(results["sizes"])
            progress.checkpoint(results)
            if settings.work_dir is None:
                shutil.rmtree(work / f"n{n}", ignore_errors=True)
    return results | {"targets": targets(results["sizes"])}


# -- report -----------------------------------------------------------------------------------


def _f(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def _sweep_table(rows: Sequence[dict], exact: dict) -> str:
    cells = [
        [
            row["route"],
            f"k′ {row['shortlist']} (ef {row['ef_search']})"
            if row["route"] == "c2f"
            else f"ef {row['ef_search']}",
            *(_f(row[key]) for key in ("index_p50_us", "index_p99_us", "p50_us", "p99_us")),
            *(_f(row[key], 3) for key in ("recall_at_10", "domain_p10", "intent_p10")),
        ]
        for row in rows
    ]
    for dim in ("256", "64"):
        quality = [_f(exact[dim][key], 3) for key in ("domain_p10", "intent_p10")]
        cells.append([f"exact {dim}-d", "", "", "", "", "", "", *quality])
    return markdown_table(
        [
            "route",
            "setting",
            "index p50 µs",
            "index p99 µs",
            "call p50 µs",
            "call p99 µs",
            "recall@10",
            "same-domain P@10",
            "same-intent P@10",
        ],
        cells,
    )


def _size_section(size: dict) -> str:
    n, timings, memory, disk, points = (
        size["n"],
        size["timings"],
        size["memory"],
        size["disk"],
        size["points"],
    )
    plan = size["baseline"]
    lines = [f"## N = {n:,}"]
    lines.append(
        markdown_table(
            ["", "collection (coarse + C2F)", "HNSW-256 fp32"],
            [
                ["import, vectors/s (before the graph build)", _f(timings["import_per_s"], 0), ""],
                [
                    "graph build, s",
                    _f(timings["graph_build"]),
                    _f(timings["baseline_build"]) if plan["built"] else "not built",
                ],
                ["import + graph + snapshots, min", _f(timings["collection_total_s"] / 60, 2), ""],
                [
                    "anonymous RSS per doc after open + queries, B",
                    _f(memory["collection"]["rss_anon_per_doc"]),
                    _f(memory.get("hnsw256", {}).get("rss_anon_per_doc"))
                    or f"{plan['bytes_per_vector']:,.0f} by FAISS's accounting",
                ],
                [
                    "anonymous RSS per doc after open, B",
                    _f(memory["collection"]["rss_anon_opened_per_doc"]),
                    _f(memory.get("hnsw256", {}).get("rss_anon_opened_per_doc")),
                ],
                [
                    "file pages resident after queries, MB",
                    _f(memory["collection"]["rss_file_searched_bytes"] / 1e6),
                    _f(memory.get("hnsw256", {}).get("rss_file_searched_bytes", 0) / 1e6),
                ],
                [
                    "on disk per doc (allocated), B",
                    _f(disk["collection"]["allocated"] / n),
                    _f(disk.get("hnsw256", {}).get("allocated", 0) / n),
                ],
                [
                    "on disk per doc (apparent), B",
                    _f(disk["collection"]["apparent"] / n),
                    _f(disk.get("hnsw256", {}).get("apparent", 0) / n),
                ],
                [
                    "restart (open in a fresh process), s",
                    _f(memory["collection"]["open_seconds"], 2),
                    _f(memory.get("hnsw256", {}).get("open_seconds"), 2),
                ],
            ],
        )
    )
    if not plan["built"]:
        lines.append(
            f"HNSW-256 not built: {plan['skipped_because']} ({plan['bytes'] / 1e9:.1f} GB)."
        )
    recovery = memory["collection"].get("recovery", {})
    lines.append(f"Restart recovery: `{json.dumps(recovery, default=str)}`")

    def point(row: dict | None, knob: str) -> str:
        if row is None:
            return "not reached"
        value = row["shortlist" if knob == "k′" else "ef_search"]
        return (
            f"{knob} {value}: index p50 {row['index_p50_us']:,.0f} µs, "
            f"recall {row['recall_at_10']:.3f}, "
            f"domain P@10 {row['domain_p10']:.3f}, intent P@10 {row['intent_p10']:.3f}"
        )

    ratios = {key: points.get(key) for key in ("c2f_p50_ratio", "ram_ratio", "coarse_p50_ratio")}
    lines.append(
        "Operating points (the smallest setting reaching the bar):\n\n"
        + bullet_list(
            {
                f"C2F at recall@10 ≥ {points['recall_bar']}": point(points["c2f"], "k′"),
                f"HNSW-256 at recall@10 ≥ {points['recall_bar']}": point(
                    points["hnsw256_at_recall"], "ef"
                ),
                f"coarse at same-domain P@10 ≥ {points['domain_precision_bar']:.3f}": point(
                    points["coarse"], "ef"
                ),
                f"HNSW-256 at same-domain P@10 ≥ {points['domain_precision_bar']:.3f}": point(
                    points["hnsw256_at_domain_precision"], "ef"
                ),
                **{
                    key.replace("_", " "): "" if value is None else f"{value:.2f}×"
                    for key, value in ratios.items()
                },
            }
        )
    )
    lines.append(
        "Sweeps (coarse recall is against exact 64-d; C2F and HNSW-256 against exact 256-d):\n\n"
        + _sweep_table(size["sweeps"], size["exact"])
    )
    return "\n\n".join(lines)


def _fidelity_section(check: dict) -> str:
    recall = {(r["set"], r["dim"], r["ef_search"]): r for r in check["rows"]}
    keys = sorted({(r["dim"], r["ef_search"]) for r in check["rows"]})
    table = markdown_table(
        [
            "dim",
            "efSearch",
            "recall@10 real",
            "recall@10 synthetic",
            "p50 µs real",
            "p50 µs synthetic",
        ],
        [
            [
                dim,
                ef,
                _f(recall["real", dim, ef]["recall_at_10"], 3),
                _f(recall["synthetic", dim, ef]["recall_at_10"], 3),
                _f(recall["real", dim, ef]["p50_us"]),
                _f(recall["synthetic", dim, ef]["p50_us"]),
            ]
            for dim, ef in keys
        ],
    )
    exact = markdown_table(
        ["set", "exact search at", "same-domain P@10", "same-intent P@10"],
        [
            [row["set"], f"{row['dim']}-d", _f(row["domain_p10"], 3), _f(row["intent_p10"], 3)]
            for row in check["exact"]
        ],
    )
    close = markdown_table(
        [
            "dim",
            "max abs Δ recall@10",
            "mean Δ recall@10 (synthetic − real)",
            "median p50 synthetic / real",
        ],
        [
            [
                row["dim"],
                _f(row["max_abs_recall_difference"], 3),
                _f(row["mean_recall_difference"], 3),
                _f(row["median_p50_ratio_synthetic_to_real"], 2),
            ]
            for row in check["closeness"]
        ],
    )
    return (
        f"## Synthetic against real (N = {check['n']:,} each, the same real queries)\n\n"
        f"{close}\n\n{exact}\n\n{table}"
    )


def markdown(report: dict) -> str:
    settings = report["settings"]
    parts = [
        "# Scale: the tiered C2F collection against HNSW-256"
        + (" (smoke run)" if report["smoke"] else ""),
        f"Measured by `{report['command']}`. *Index* times (the comparisons) are the index work "
        "alone: the collection's 64-d graph search for coarse, shortlist plus exact re-rank from "
        "the vector file for C2F (the collection's own timings), the bare FAISS search for "
        "HNSW-256. *Call* times are the collection's `search` / `search_c2f` as the service "
        "calls them (query normalisation and the ids read from SQLite included). One query "
        f"per call, 1 FAISS thread, {settings['rounds']} round-robin rounds over every route and "
        f"setting. HNSW-64 storage: {settings['storage_used']}.",
    ]
    if report.get("targets"):
        parts.append(
            "## Targets\n\n"
            + markdown_table(
                ["target", "reached", "met"],
                [
                    [
                        t["target"],
                        _f(t["reached"], 2) if isinstance(t["reached"], float) else t["reached"],
                        "yes" if t["met"] else "**no**",
                    ]
                    for t in report["targets"]
                ],
            )
        )
    parts += [_size_section(size) for size in report["sizes"]]
    if "fidelity" in report:
        parts.append(_fidelity_section(report["fidelity"]))
    parts += [
        "## Data\n\n" + bullet_list(report.get("data", {})),
        "## Parameters\n\n" + bullet_list(settings),
        "## Machine\n\n" + bullet_list(report["machine"]),
    ]
    return "\n\n".join(parts)


def plot(report: dict, path: Path) -> None:
    sizes = report["sizes"]
    figure = Figure(figsize=(6 * max(len(sizes), 1), 9))
    axes = figure.subplots(2, max(len(sizes), 1), squeeze=False)
    styles = {"coarse": "tab:blue", "c2f": "tab:green", "hnsw256": "tab:red"}
    for column, size in enumerate(sizes):
        top, bottom = axes[0][column], axes[1][column]
        for route, colour in styles.items():
            rows = [row for row in size["sweeps"] if row["route"] == route]
            if not rows:
                continue
            p50 = [row["index_p50_us"] for row in rows]
            label = {
                "coarse": "coarse HNSW-64 (vs exact 64-d)",
                "c2f": "C2F 64 → 256",
                "hnsw256": "HNSW-256 fp32",
            }[route]
            top.plot(p50, [row["recall_at_10"] for row in rows], "o-", color=colour, label=label)
            quality = "domain_p10" if route == "coarse" else "intent_p10"
            bottom.plot(
                p50,
                [row[quality] for row in rows],
                "o-",
                color=colour,
                label=f"{label}: {quality.replace('_p10', '')} P@10",
            )
            if route == "hnsw256":
                bottom.plot(
                    p50,
                    [row["domain_p10"] for row in rows],
                    "s--",
                    color=colour,
                    label="HNSW-256: domain P@10",
                )
        for key, style in (("domain_p10", ":"), ("intent_p10", "-.")):
            bottom.axhline(
                size["exact"]["256"][key],
                color="black",
                linestyle=style,
                label=f"exact 256-d {key.replace('_p10', '')} P@10",
            )
        top.axhline(report["settings"]["recall_target"], color="grey", linestyle=":")
        top.set(title=f"N = {size['n']:,}", xlabel="index p50 µs", ylabel="recall@10", xscale="log")
        bottom.set(xlabel="index p50 µs", ylabel="precision@10", xscale="log")
        top.legend(fontsize=7)
        bottom.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
