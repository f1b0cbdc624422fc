"""Millions of documents on one machine: the tiered C2F collection against a plain HNSW-256.

    python -m benchmarks scale --bundle runs/clinc150-d5/bundle --work-dir /data/scale \
        --keep-index /data/scale-10m                           # N = 1M, 3M, 10M (hours)
    python -m benchmarks scale --sizes 100000 --out /tmp/scale  # a dry run
    python -m benchmarks scale --smoke --out DIR                # seconds: toy vectors

Vectors come from a labelled mixture fitted to real V5 embeddings
(:mod:`benchmarks.harness.labelled_mixture`: one component per CLINC-150 / Banking77 intent, with
a low-rank-plus-diagonal covariance, and k-means components for the unlabelled sentences), so
every synthetic document has an intent and a domain. The queries are real: held-out CLINC-150
test texts. The real embeddings (mixture fit and queries) come from ``--bundle``'s ONNX encoder
when it is given, so the synthetic documents live in the space the service serves for that
bundle; without it, from a V5 head trained in-process. First, at the real set's size, the
synthetic vectors are checked against the real ones (HNSW recall against efSearch at 64 and
256-d, latency, and the same-domain / same-intent precision of exact search). Then, per N, the
vectors are streamed chunk by chunk (never all in memory) into

- the **tiered collection** (:class:`index.Collection`): the SQLite store of record (each
  document's text a placeholder naming its domain and intent) and the full unit vectors in a
  memory-mapped file, imported with no index; then an HNSW graph (``--storage``) at the coarse
  prefix and at each ``--shortlist-dims`` prefix (default: the bundle's shortlist prefix, the one
  the service indexes for C2F; without ``--bundle``, the prefix the export's measurement picks on
  the real vectors, :mod:`training.evaluation.shortlist`), built from the file one at a time (a
  reopen with one more graph in the layout). Coarse queries search the 64-d graph (efSearch
  sweep, per call); fine queries go through C2F (``search_c2f``: shortlist k′ from one graph,
  exact re-rank from the file; per shortlist dim, a grid of k′ and efSearch, :func:`c2f_settings`);
- the **baseline** a user would otherwise run: a FAISS ``IndexHNSWFlat(256, M,
  METRIC_INNER_PRODUCT)`` over the same unit vectors, in RAM (efSearch sweep), unless FAISS's own
  size accounting puts it over the memory budget or its estimated build time over the limit;
- the exact top-10 at 256-d and at 64-d (blocked products over each chunk, a running top-k).

Per N and route: import rate (vectors/s before the graph build) and each graph's build time;
anonymous RSS per document of the layout a route needs (``RssAnon`` of a fresh process that opens
the folder with that one graph, the others left on disk, then runs the queries, minus its
``RssAnon`` before opening; the coarse route and C2F from 64-d share the 64-d layout), beside the
graph's size by FAISS's accounting (``stats().indexes[...].bytes``); bytes on disk per
document, restart time (that open); p50/p99 single-query index time (1 thread, round-robin over
every route and setting); recall@10 against exact search (C2F and HNSW-256 against exact 256-d,
coarse against exact 64-d); and task quality: same-domain precision@10 for coarse, same-intent
precision@10 for C2F and HNSW-256, each beside exact 256-d search's on the same queries.
Operating points are the smallest efSearch reaching the bar (coarse, HNSW-256), and for C2F the
setting of the grid with the lowest index p50 reaching it. The C2F targets are judged at
the shortlist dim that reaches recall 0.95 with the least RAM. The coarse target keeps the
issue's bar (same-domain P@10 within 0.005 of exact 256-d's); beside it, labelled as an
additional comparison and not a substitute, coarse against HNSW-256 at the best same-domain
precision coarse reaches, minus 0.005.

``--keep-index DIR`` moves the largest N's collection to ``DIR`` for
:mod:`benchmarks.scale_service`, with the bundle record the service checks
(:func:`index.catalog.check_bundle_record`, written before the store) and
``scale_build.json`` (the service settings that open it without a rebuild). Writes
``scale{,_smoke}.{json,md,png}``; an interrupted run keeps every N it finished (checkpoints).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import faiss
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from benchmarks.harness.labelled_mixture import (
    LabelledMixture,
    LabelledReal,
    LabelledVectors,
    labelled_real,
    toy_labelled,
)
from benchmarks.harness.markdown import bullet_list, markdown_table
from benchmarks.harness.restart_probe import probe
from benchmarks.harness.runner import Progress, bundle_folder, option
from benchmarks.harness.search_measure import (
    Case,
    Search,
    faiss_threads,
    fastest_reaching,
    first_reaching,
    frontier,
    measure,
    recall_at_k,
)
from bundle import Manifest, load_bundle
from index import Collection, Hit, HnswParams, SearchResult
from index.catalog import check_bundle_record
from index.vectors import prefix_unit, unit_rows
from training.evaluation.shortlist import measure_shortlist

K = 10
TARGETS = {
    "c2f_recall": 0.95,
    "ram_ratio": 3.0,
    "c2f_p50_ratio": 2.0,
    "coarse_p50_ratio": 3.7,
    "coarse_to_fine_p50": 0.5,
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
    storage: str = option("sq8", "storage of the collection's HNSW graphs: flat or sq8")
    shortlist_dims: tuple[int, ...] = option(
        (),
        "C2F shortlist prefixes: the collection has an HNSW graph at each (and at the coarse "
        "prefix, for the coarse route), and C2F is swept from each (default: the bundle's "
        "shortlist prefix; without --bundle, the one measured on the real vectors)",
    )
    m: int = option(32, "HNSW degree M (collection and baseline)")
    ef_construction: int = option(100, "HNSW efConstruction (collection and baseline)")
    ef_values: tuple[int, ...] = option(
        (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512), "efSearch sweep (coarse, HNSW-256)"
    )
    factors: tuple[int, ...] = option(
        (1, 2, 4, 8, 16, 32, 64, 128), "C2F sweep: shortlist k′ = 10 × factor"
    )
    c2f_min_ef: int = option(
        16, "C2F: each k′ is swept with every --ef-values efSearch from max(this, k′) up"
    )
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
    bundle: Path | None = option(
        None,
        "embed the real sentences (mixture fit and queries) with this V5 bundle's ONNX encoder "
        "instead of a head trained in-process; needed by --keep-index",
        parse=bundle_folder,
    )
    keep_index: Path | None = option(
        None,
        "leave the largest N's tiered collection here, a folder the service opens for --bundle "
        "(python -m benchmarks scale_service --index-dir DIR --bundle B)",
    )
    tag: str = option("", "added to the result file names (one file per corpus size, say)")
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
    shortlist_dims=(64, 128),
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


def results_name(settings: Settings) -> str:
    return "scale" + (f"_{settings.tag}" if settings.tag else "")


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
    made_by = "head" if settings.bundle is None else _bundle(settings).content_hash[:12]
    cache = work / f"real_v5_q{settings.queries}_s{settings.seed}_{made_by}.npz"
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

    progress(
        "embedding the real sentences with "
        + ("a V5 head" if settings.bundle is None else f"the encoder of {settings.bundle}")
        + " (minutes)"
    )
    real = labelled_real(
        data_dir(), settings.queries, settings.seed, progress.enabled, settings.bundle
    )
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


def _bundle(settings: Settings) -> Manifest:
    """The ``--bundle``'s manifest, checked against the run's dims."""
    assert settings.bundle is not None
    manifest = load_bundle(settings.bundle)
    served = set(manifest.prefix_dims)
    if manifest.dim != settings.dim or manifest.coarse_dim != settings.coarse_dim:
        raise SystemExit(
            f"error: bundle {settings.bundle} serves {manifest.coarse_dim} → {manifest.dim}, "
            f"the run measures {settings.coarse_dim} → {settings.dim}"
        )
    if not served >= set(settings.shortlist_dims):
        raise SystemExit(
            f"error: bundle {settings.bundle} has no prefix {set(settings.shortlist_dims)}"
        )
    return manifest


def with_shortlist_dims(settings: Settings, real: LabelledReal, progress: Progress) -> Settings:
    """``settings`` with the shortlist prefixes to build: those given, else the bundle's
    shortlist prefix, else (no bundle) the one the export's measurement picks on the real set
    (its base as the corpus, its queries as the queries)."""
    if settings.shortlist_dims:
        dims = settings.shortlist_dims
    elif settings.bundle is not None:
        dims = (_bundle(settings).shortlist_dim,)
        progress(f"C2F shortlist prefix: {dims[0]} (the bundle's)")
    else:
        prefixes = [*range(settings.coarse_dim, settings.dim, settings.coarse_dim), settings.dim]
        measured = measure_shortlist(
            real.base.vectors, real.queries.vectors, prefixes, first_stage=False
        )
        dims = (measured.shortlist_dim,)
        progress(f"C2F shortlist prefix: {dims[0]} (measured on the real vectors)")
    if max(dims) >= settings.dim:
        raise SystemExit(
            f"error: the C2F shortlist prefixes {list(dims)} must be below {settings.dim}: at "
            "the full dimension C2F is plain search (no prefix reached the recall bar); pass "
            "--shortlist-dims"
        )
    return replace(settings, shortlist_dims=tuple(dims))


def hnsw_params(settings: Settings) -> HnswParams:
    """The collection's HNSW parameters (every graph)."""
    return HnswParams(
        m=settings.m, ef_construction=settings.ef_construction, storage=settings.storage
    )


def graph_dims(settings: Settings) -> list[int]:
    """The prefixes the collection has an HNSW graph at: the coarse one and each shortlist's."""
    return sorted({settings.coarse_dim, *settings.shortlist_dims})


def label_texts(real: LabelledReal) -> np.ndarray:
    """The stored text of a synthetic document, by intent id + 1 (0: unlabelled): a placeholder
    naming its domain and intent (the store of record needs a text; nothing reads it)."""
    texts = np.full(len(real.intent_names) + 1, "synthetic document, unlabelled", dtype=object)
    for intent, domain in zip(real.base.intents, real.base.domains, strict=True):
        if intent >= 0:
            texts[intent + 1] = (
                f"synthetic document: {real.domain_names[domain]} / {real.intent_names[intent]}"
            )
    return texts


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


def _folder_bytes(path: Path) -> dict:
    """Apparent and allocated bytes of every file under ``path`` (sparse tails count only in
    the first)."""
    files = [item.stat() for item in path.rglob("*") if item.is_file()]
    return {
        "apparent": sum(item.st_size for item in files),
        "allocated": sum(item.st_blocks * 512 for item in files),
    }


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
            with faiss_threads(settings.build_threads):
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


def _collection(path: Path, settings: Settings, graphs: Sequence[int] = ()) -> Collection:
    """The tiered collection, with an HNSW graph at each of ``graphs`` (none: import only)."""
    return Collection(
        path,
        settings.dim,
        (*graph_dims(settings), settings.dim),
        index_kinds=("hnsw",),
        hnsw=hnsw_params(settings),
        full_dtype=settings.full_dtype,
        layout={
            **{dim: ("hnsw",) if dim in graphs else () for dim in graph_dims(settings)},
            settings.dim: (),
        },
    )


def _probe_spec(path: Path, settings: Settings, queries: Path, graph: int) -> dict:
    """The restart probe of a layout with one graph, at ``graph``: what a service serving only
    the routes that graph supports (C2F from it, and coarse when it is the coarse prefix's)
    holds; the folder's other graphs stay on disk, unread."""
    searches: list[dict] = [{"shortlist_dim": graph, "factor": max(settings.factors)}]
    if graph == settings.coarse_dim:
        searches.insert(0, {"dim": graph, "kind": "hnsw"})
    return {
        "kind": "collection",
        "path": str(path),
        "dim": settings.dim,
        "prefix_dims": [graph, settings.dim],
        "hnsw": asdict(hnsw_params(settings)),
        "layout": {graph: ["hnsw"], settings.dim: []},
        "full_dtype": settings.full_dtype,
        "queries": str(queries),
        "searches": searches,
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
    real: LabelledReal,
    settings: Settings,
    plan: dict,
    progress: Progress,
) -> tuple[dict, LabelledVectors, dict]:
    """Stream ``n`` draws into the collection (no index), the baseline (when planned) and the
    exact top-k; then build the collection's graphs one at a time, widest first (each a reopen
    with one more graph in the layout, the graphs before it loaded from the snapshot).
    Timings, the labels, and the exact ids."""
    queries = real.queries
    texts = label_texts(real)
    labels = LabelledVectors(np.empty(0), np.empty(n, np.int32), np.empty(n, np.int32))
    truth = {
        "256": RunningTopK(unit_rows(queries.vectors)),
        "64": RunningTopK(prefix_unit(queries.vectors, settings.coarse_dim)),
    }
    seconds = dict.fromkeys(("generate", "import", "exact", "baseline_build"), 0.0)
    baseline = hnsw_graph(settings.dim, settings) if plan["built"] else None
    path = folder / "collection"
    if settings.bundle is not None:  # the service opens only a folder that names its bundle
        path.mkdir(parents=True)
        check_bundle_record(path, _bundle(settings))
    with faiss_threads(settings.build_threads), _collection(path, settings) as collection:
        started = time.perf_counter()
        for index, part in enumerate(mixture.chunks(n, settings.seed + n, settings.chunk)):
            seconds["generate"] += time.perf_counter() - started
            offset = index * settings.chunk
            labels.intents[offset : offset + len(part)] = part.intents
            labels.domains[offset : offset + len(part)] = part.domains
            unit = unit_rows(part.vectors)
            part_texts = texts[part.intents + 1].tolist()
            started = time.perf_counter()
            truth["256"].add(unit, offset)
            truth["64"].add(prefix_unit(unit, settings.coarse_dim), offset)
            seconds["exact"] += time.perf_counter() - started
            started = time.perf_counter()
            for start in range(0, len(part), settings.import_batch):
                rows = unit[start : start + settings.import_batch]
                ids = [str(offset + start + i) for i in range(len(rows))]
                collection.upsert(ids, part_texts[start : start + len(rows)], rows)
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
        import_breakdown = collection.stats().ingest_seconds
        graphs: list[int] = []
        graph_seconds: dict[str, dict] = {}
        # Widest first: a graph is built (float32, then SQ8 from a copy of its vectors) while
        # the ones before it are loaded, so the peak is lowest with the narrow ones loaded.
        for dim in sorted(graph_dims(settings), reverse=True):
            graphs.append(dim)
            progress(f"N={n:,}: building the {dim}-d graph from the vector file")
            started = time.perf_counter()
            with _collection(path, settings, graphs) as built:
                build = time.perf_counter() - started
                started = time.perf_counter()
                built.snapshot()
                graph_seconds[str(dim)] = {
                    "build": build,
                    "snapshot": time.perf_counter() - started,
                }
                stats = built.stats()
    if baseline is not None:
        faiss.write_index(baseline, str(folder / "hnsw256.faiss"))
        del baseline
    import_s = seconds["import"] + seconds["import_snapshot"]
    coarse_graph = graph_seconds[str(settings.coarse_dim)]
    timings = seconds | {
        "import_per_s": n / seconds["import"],
        "import_with_snapshot_per_s": n / import_s,
        "import_breakdown_s": import_breakdown,
        "graphs": graph_seconds,
        "collection_coarse_layout_s": import_s + coarse_graph["build"] + coarse_graph["snapshot"],
        "collection_total_s": import_s
        + sum(graph["build"] + graph["snapshot"] for graph in graph_seconds.values()),
        "collection_indexes": {name: index.as_dict() for name, index in stats.indexes.items()},
        "build_recovery": stats.recovery.as_dict(),
    }
    return timings, labels, {dim: topk.ids for dim, topk in truth.items()}


def _percentiles(seconds: Sequence[float]) -> dict:
    micro = 1e6 * np.asarray(seconds)
    return {
        "index_p50_us": float(np.percentile(micro, 50)),
        "index_p99_us": float(np.percentile(micro, 99)),
    }


def c2f_settings(settings: Settings) -> list[tuple[int, int]]:
    """C2F's (shortlist factor, efSearch) grid: each k′ = 10 × factor with every swept efSearch
    from ``max(c2f_min_ef, k′)`` up (k′ alone where it exceeds them all), so that the fastest
    setting reaching a recall bar is found whichever of the two knobs limits it."""
    grid = []
    for factor in settings.factors:
        floor = max(settings.c2f_min_ef, K * factor)
        efs = sorted({floor, *(ef for ef in settings.ef_values if ef > floor)})
        grid += [(factor, ef) for ef in efs]
    return grid


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
    ``index_p99_us`` the index work alone, from the collection's own ``timings``: the 64-d
    graph's top-10 search for coarse (``search``'s own timing), the funnel (shortlist and
    re-rank in one native call) for C2F, and the bare FAISS search for HNSW-256."""
    rows, cases = [], {}
    full_queries = np.ascontiguousarray(queries.vectors, np.float32)
    unit_queries = unit_rows(full_queries)
    index_seconds: dict[str, list[float]] = {}

    with _collection(folder / "collection", settings, graph_dims(settings)) as collection:

        def timed(name: str, call: Callable[[np.ndarray], SearchResult]) -> Search:
            """``call``'s hits, recording the index seconds of each single-query call (every
            step in its ``timings``) under ``name``."""
            spent = index_seconds.setdefault(name, [])

            def search(query: np.ndarray) -> list[list[Hit]]:
                result = call(query)
                if len(query) == 1:
                    spent.append(sum(result.timings.values()))
                return result.hits

            return search

        def c2f(name: str, dim: int, factor: int, ef: int) -> Search:
            """``search_c2f`` from the ``dim`` graph (its funnel timed)."""
            return timed(
                name,
                lambda query: collection.search_c2f(
                    query, K, dim, factor, kind="hnsw", ef_search=ef
                ),
            )

        def index_search(name: str, ef: int) -> Search:
            """The coarse graph's top-10 ``search`` (its index work timed)."""
            return timed(
                name,
                lambda query: collection.search(
                    query, K, settings.coarse_dim, kind="hnsw", ef_search=ef
                ),
            )

        for ef in settings.ef_values:
            search: Search = lambda query, ef=ef: collection.search(  # noqa: E731
                query, K, settings.coarse_dim, kind="hnsw", ef_search=ef
            ).hits
            cases[f"coarse/{ef}"] = Case(search, full_queries)
            name = f"coarse-index/{ef}"
            cases[name] = Case(index_search(name, ef), full_queries)
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
        for dim in sorted(settings.shortlist_dims):
            for factor, ef in c2f_settings(settings):
                name = f"c2f/{dim}/{factor}/{ef}"
                search = c2f(name, dim, factor, ef)
                cases[name] = Case(search, full_queries)
                found = _ids(search(full_queries))
                rows.append(
                    {
                        "route": "c2f",
                        "shortlist_dim": dim,
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
        for spent in index_seconds.values():
            spent.clear()
        latencies = {
            name: value.to_json() for name, value in measure(cases, settings.rounds).items()
        }
        del baseline
    # The first timing of each case is measure's untimed warm-up query.
    index = {name: _percentiles(spent[1:]) for name, spent in index_seconds.items()}
    for row in rows:
        route = row["route"]
        if route == "coarse":
            row |= (
                latencies[f"coarse/{row['ef_search']}"] | index[f"coarse-index/{row['ef_search']}"]
            )
        elif route == "c2f":
            name = f"c2f/{row['shortlist_dim']}/{row['factor']}/{row['ef_search']}"
            row |= latencies[name] | index[name]
        else:
            latency = latencies[f"hnsw256/{row['ef_search']}"]
            row |= latency | {"index_p50_us": latency["p50_us"], "index_p99_us": latency["p99_us"]}
    return rows


def _ratio(numerator: dict | None, denominator: dict | None, key: str) -> float | None:
    if numerator is None or denominator is None:
        return None
    return numerator[key] / denominator[key]


def operating_points(size: dict, settings: Settings) -> dict:
    """The cheapest setting per route reaching each bar, and the ratios between routes: C2F
    per shortlist dim, with the anonymous RAM of the layout holding only that dim's graph."""
    by_route: dict[str, list[dict]] = {"coarse": [], "c2f": [], "hnsw256": []}
    for row in size["sweeps"]:
        by_route[row["route"]].append(row)
    memory = size["memory"]
    baseline_rss = memory.get("hnsw256", {}).get("rss_anon_per_doc")
    hnsw_at_recall = first_reaching(by_route["hnsw256"], settings.recall_target, "ef_search")
    c2f = {}
    for dim in sorted(settings.shortlist_dims):
        rows = [row for row in by_route["c2f"] if row["shortlist_dim"] == dim]
        point = fastest_reaching(rows, settings.recall_target, "index_p50_us")
        rss = memory["graphs"][str(dim)]["rss_anon_per_doc"]
        c2f[str(dim)] = {
            "point": point,
            "best_recall": max(row["recall_at_10"] for row in rows),
            "rss_anon_per_doc": rss,
            "faiss_bytes_per_doc": memory["graphs"][str(dim)]["faiss_bytes_per_doc"],
            "c2f_p50_ratio": _ratio(hnsw_at_recall, point, "index_p50_us"),
            "ram_ratio": None if baseline_rss is None else baseline_rss / rss,
        }
    reaching = [dim for dim, entry in c2f.items() if entry["point"] is not None]
    best = min(reaching, key=lambda dim: c2f[dim]["rss_anon_per_doc"], default=None)
    domain_bar = size["exact"]["256"]["domain_p10"] - settings.precision_tolerance
    coarse = first_reaching(by_route["coarse"], domain_bar, "ef_search", "domain_p10")
    hnsw_at_domain = first_reaching(by_route["hnsw256"], domain_bar, "ef_search", "domain_p10")
    # Not a target: coarse against HNSW-256 at the best same-domain precision coarse reaches.
    plateau = max(row["domain_p10"] for row in by_route["coarse"])
    level = plateau - settings.precision_tolerance
    coarse_at_level = first_reaching(by_route["coarse"], level, "ef_search", "domain_p10")
    hnsw_at_level = first_reaching(by_route["hnsw256"], level, "ef_search", "domain_p10")
    # The coarse route at exact 64-d search's same-domain precision, against the fine route.
    exact_coarse_bar = size["exact"]["64"]["domain_p10"]
    coarse_at_exact = first_reaching(
        by_route["coarse"], exact_coarse_bar, "ef_search", "domain_p10"
    )
    fine = c2f[best]["point"] if best is not None else None
    return {
        "recall_bar": settings.recall_target,
        "c2f": c2f,
        "best_shortlist_dim": best,
        "hnsw256_at_recall": hnsw_at_recall,
        "domain_precision_bar": domain_bar,
        "coarse": coarse,
        "hnsw256_at_domain_precision": hnsw_at_domain,
        "coarse_p50_ratio": _ratio(hnsw_at_domain, coarse, "index_p50_us"),
        "exact_coarse_precision": exact_coarse_bar,
        "coarse_at_exact_precision": coarse_at_exact,
        "coarse_to_fine_p50": _ratio(coarse_at_exact, fine, "index_p50_us"),
        "coarse_plateau": {
            "coarse_best_domain_p10": plateau,
            "level": level,
            "coarse": coarse_at_level,
            "hnsw256": hnsw_at_level,
            "p50_ratio": _ratio(hnsw_at_level, coarse_at_level, "index_p50_us"),
        },
    }


def measure_size(
    n: int,
    work: Path,
    mixture: LabelledMixture,
    real: LabelledReal,
    settings: Settings,
    plan: dict,
    progress: Progress,
) -> dict:
    folder = work / f"n{n}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    queries = real.queries
    timings, labels, truth = import_and_build(n, folder, mixture, real, settings, plan, progress)
    np.save(folder / "queries.npy", queries.vectors.astype(np.float32))
    np.save(folder / "queries_unit.npy", unit_rows(queries.vectors))
    memory: dict = {"graphs": {}}
    for dim in graph_dims(settings):
        progress(f"N={n:,}: restart in a fresh process, the {dim}-d graph's layout")
        spec = _probe_spec(folder / "collection", settings, folder / "queries.npy", dim)
        faiss_bytes = timings["collection_indexes"][f"cosine-{dim}-hnsw"]["bytes"]
        memory["graphs"][str(dim)] = _memory(probe(spec), n) | {
            "faiss_bytes_per_doc": faiss_bytes / n
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
        "coarse_dim": settings.coarse_dim,
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
    """The issue's targets: at the largest N for the collection's own figures (the coarse
    layout, a 64-d graph only: what the service opens), at the largest N with a baseline for
    the comparisons; C2F's at its best shortlist dim (the least RAM among those reaching the
    recall bar)."""
    if not sizes:
        return []
    largest = sizes[-1]
    n = f"N = {largest['n']:,}"
    result = []
    compared = [size for size in sizes if size["baseline"]["built"]]
    if compared:
        size = compared[-1]
        points, at = size["points"], f"N = {size['n']:,}"
        best = points["best_shortlist_dim"]
        if best is None:
            dim, entry = max(points["c2f"].items(), key=lambda item: item[1]["best_recall"])
            reached: object = f"{entry['best_recall']:.3f} (best, {dim}-d shortlist)"
        else:
            entry = points["c2f"][best]
            reached = f"{entry['point']['recall_at_10']:.3f} ({best}-d shortlist)"
        result.append(
            {
                "target": f"{at}: C2F recall@10 ≥ {TARGETS['c2f_recall']} against exact 256-d",
                "reached": reached,
                "met": best is not None,
            }
        )
        c2f = points["c2f"][best] if best is not None else {}
        for key, value, what in (
            (
                "ram_ratio",
                c2f.get("ram_ratio"),
                f"{at}: HNSW-256 anonymous RAM / C2F layout's (its shortlist graph only) "
                f"≥ {TARGETS['ram_ratio']}×",
            ),
            (
                "c2f_p50_ratio",
                c2f.get("c2f_p50_ratio"),
                f"{at}: HNSW-256 / C2F index p50 at recall@10 ≥ 0.95 ≥ {TARGETS['c2f_p50_ratio']}×",
            ),
            (
                "coarse_p50_ratio",
                points["coarse_p50_ratio"],
                f"{at}: HNSW-256 / coarse index p50 at equal same-domain P@10 (within "
                f"0.005 of exact 256-d's) ≥ {TARGETS['coarse_p50_ratio']}×",
            ),
        ):
            result.append(
                {
                    "target": what,
                    "reached": _missing_reason(key, points) if value is None else value,
                    "met": value is not None and value >= TARGETS[key],
                }
            )
        ratio = points["coarse_to_fine_p50"]
        result.append(
            {
                "target": f"{at}: coarse index p50 at same-domain P@10 ≥ exact 64-d search's "
                f"({points['exact_coarse_precision']:.3f}) ≤ {TARGETS['coarse_to_fine_p50']}× "
                "C2F's at recall@10 ≥ 0.95",
                "reached": _missing_reason("coarse_to_fine_p50", points)
                if ratio is None
                else ratio,
                "met": ratio is not None and ratio <= TARGETS["coarse_to_fine_p50"],
            }
        )
    coarse_layout = largest["memory"]["graphs"][str(largest["coarse_dim"])]
    per_doc = coarse_layout["rss_anon_per_doc"]
    timings = largest["timings"]
    minutes = timings["collection_coarse_layout_s"] / 60
    restart = coarse_layout["open_seconds"]
    result += [
        {
            "target": f"{n}: anonymous RSS ≤ {TARGETS['rss_bytes_per_doc']} B per document "
            "(coarse layout: the 64-d graph)",
            "reached": per_doc,
            "met": per_doc <= TARGETS["rss_bytes_per_doc"],
        },
        {
            "target": f"{n}: import ≥ {TARGETS['import_per_s']:,} vectors/s before the graph build",
            "reached": timings["import_per_s"],
            "met": timings["import_per_s"] >= TARGETS["import_per_s"],
        },
        {
            "target": f"{n}: built (import, 64-d graph, snapshots) in "
            f"≤ {TARGETS['build_minutes']} min",
            "reached": minutes,
            "met": minutes <= TARGETS["build_minutes"],
        },
        {
            "target": f"{n}: restart ≤ {TARGETS['restart_s']} s (coarse layout)",
            "reached": restart,
            "met": restart <= TARGETS["restart_s"],
        },
    ]
    return result


_COARSE_BARS = {
    "coarse_to_fine_p50": (
        "coarse_at_exact_precision",
        "exact_coarse_precision",
        "exact 64-d's same-domain P@10",
        "C2F never reaches the recall bar",
    ),
    "coarse_p50_ratio": (
        "coarse",
        "domain_precision_bar",
        "same-domain P@10",
        "HNSW-256 never reaches the same-domain P@10 bar",
    ),
}
"""Per coarse ratio: its coarse point, its bar, the bar's name, and why else it has no value."""


def _missing_reason(key: str, points: dict) -> str:
    """Why a ratio has no value: which bar was not reached."""
    if key in _COARSE_BARS:
        point, bar, what, otherwise = _COARSE_BARS[key]
        if points[point] is None:
            best = points["coarse_plateau"]["coarse_best_domain_p10"]
            return f"coarse never reaches {what} {points[bar]:.3f} (best {best:.3f})"
        return otherwise
    if points["best_shortlist_dim"] is None:
        return "C2F never reaches the recall bar"
    return "HNSW-256 never reaches the recall bar"


@contextmanager
def _work_folder(settings: Settings) -> Iterator[Path]:
    if settings.work_dir is not None:
        settings.work_dir.mkdir(parents=True, exist_ok=True)
        yield settings.work_dir
        return
    with tempfile.TemporaryDirectory(prefix="fractal-scale-") as folder:
        yield Path(folder)


KEPT_RECORD = "scale_build.json"
"""In a ``--keep-index`` folder: how it was built, as the service's settings that open it
without a rebuild (read by :mod:`benchmarks.scale_service`)."""


def keep_index(folder: Path, settings: Settings, n: int) -> None:
    """Move the collection in ``folder`` to ``settings.keep_index``, with :data:`KEPT_RECORD`."""
    assert settings.keep_index is not None
    target = settings.keep_index
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(folder, target)
    params = hnsw_params(settings)
    record = {
        "documents": n,
        "graphs": graph_dims(settings),
        "service_settings": {
            "index_kinds": "hnsw",
            "fine_index_kinds": "none",
            "hnsw_m": params.m,
            "hnsw_ef_construction": params.ef_construction,
            "hnsw_storage": params.storage,
            "full_vectors_dtype": settings.full_dtype,
        },
        "bundle": str(settings.bundle),
    }
    (target / KEPT_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def run(settings: Settings, progress: Progress) -> dict:
    if settings.keep_index is not None and settings.bundle is None:
        raise SystemExit(
            "error: --keep-index needs --bundle: the service serves the kept folder for it"
        )
    if settings.shortlist_dims and max(settings.shortlist_dims) >= settings.dim:
        raise SystemExit(f"error: every --shortlist-dims must be below {settings.dim}")
    if settings.bundle is not None:
        manifest = _bundle(settings)
        if (
            settings.keep_index is not None
            and settings.shortlist_dims
            and (manifest.shortlist_dim not in settings.shortlist_dims)
        ):
            progress(
                f"note: the service indexes the bundle's shortlist prefix "
                f"{manifest.shortlist_dim}, which --shortlist-dims leaves out of the kept folder: "
                "the service will build its graph at start"
            )
    results: dict = {
        "machine": {"faiss_threads": 1, "build_threads": settings.build_threads or os.cpu_count()},
        "settings": asdict(settings),
        "sizes": [],
    }
    with _work_folder(settings) as work, faiss_threads(1):
        real = _real(settings, work, progress)
        settings = with_shortlist_dims(settings, real, progress)
        results["settings"] = asdict(settings)  # with the shortlist prefixes built
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
            size = measure_size(n, work, mixture, real, settings, plan, progress)
            if plan["built"]:
                built.append((n, size["timings"]["baseline_build"]))
            results["sizes"].append(size)
            results["targets"] = targets(results["sizes"])
            progress.checkpoint(results)
            if settings.keep_index is not None and n == max(settings.sizes):
                keep_index(work / f"n{n}" / "collection", settings, n)
                progress(f"N={n:,}: the tiered collection is kept in {settings.keep_index}")
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
            f"{row['shortlist_dim']}-d k′ {row['shortlist']} (ef {row['ef_search']})"
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


def _point(row: dict | None, knob: str) -> str:
    if row is None:
        return "not reached"
    setting = f"ef {row['ef_search']}"
    if knob == "k′":
        setting = f"k′ {row['shortlist']}, {setting}"
    return (
        f"{setting}: index p50 {row['index_p50_us']:,.0f} µs, "
        f"recall {row['recall_at_10']:.3f}, "
        f"domain P@10 {row['domain_p10']:.3f}, intent P@10 {row['intent_p10']:.3f}"
    )


def _ratio_text(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def _size_section(size: dict) -> str:
    n, timings, memory, disk, points = (
        size["n"],
        size["timings"],
        size["memory"],
        size["disk"],
        size["points"],
    )
    plan = size["baseline"]
    graphs = memory["graphs"]
    baseline = memory.get("hnsw256", {})
    faiss_256 = f"{plan['bytes_per_vector']:,.0f} by FAISS's accounting"
    lines = [f"## N = {n:,}"]
    header = ["", *(f"layout: {dim}-d graph only" for dim in graphs), "HNSW-256 fp32"]

    def row(label: str, values: list[str], base: str) -> list[str]:
        return [label, *values, base]

    lines.append(
        markdown_table(
            header,
            [
                row(
                    "graph build (reopen with it), s",
                    [_f(timings["graphs"][dim]["build"]) for dim in graphs],
                    _f(timings["baseline_build"]) if plan["built"] else "not built",
                ),
                row(
                    "anonymous RSS per doc after open + queries, B",
                    [_f(graphs[dim]["rss_anon_per_doc"]) for dim in graphs],
                    _f(baseline.get("rss_anon_per_doc")) or faiss_256,
                ),
                row(
                    "anonymous RSS per doc after open, B",
                    [_f(graphs[dim]["rss_anon_opened_per_doc"]) for dim in graphs],
                    _f(baseline.get("rss_anon_opened_per_doc")),
                ),
                row(
                    "the graph by FAISS's accounting (stats bytes), B per doc",
                    [_f(graphs[dim]["faiss_bytes_per_doc"]) for dim in graphs],
                    _f(plan["bytes_per_vector"]),
                ),
                row(
                    "file pages resident after queries, MB",
                    [_f(graphs[dim]["rss_file_searched_bytes"] / 1e6) for dim in graphs],
                    _f(baseline["rss_file_searched_bytes"] / 1e6) if baseline else "",
                ),
                row(
                    "restart (open in a fresh process), s",
                    [_f(graphs[dim]["open_seconds"], 2) for dim in graphs],
                    _f(baseline.get("open_seconds"), 2),
                ),
            ],
        )
    )
    breakdown = ", ".join(f"{k} {v:.1f} s" for k, v in timings["import_breakdown_s"].items())
    lines.append(
        bullet_list(
            {
                "import, vectors/s (before any graph build)": _f(timings["import_per_s"], 0),
                "import time by part": breakdown,
                "import + 64-d graph + snapshots (the coarse layout), min": _f(
                    timings["collection_coarse_layout_s"] / 60, 2
                ),
                "import + every graph + snapshots, min": _f(timings["collection_total_s"] / 60, 2),
                "collection on disk per doc, every graph included (allocated / apparent), B": (
                    f"{disk['collection']['allocated'] / n:,.1f} / "
                    f"{disk['collection']['apparent'] / n:,.1f}"
                ),
                "HNSW-256 on disk per doc, B": (
                    _f(disk["hnsw256"]["apparent"] / n) if "hnsw256" in disk else "not built"
                ),
            }
        )
    )
    if not plan["built"]:
        lines.append(
            f"HNSW-256 not built: {plan['skipped_because']} ({plan['bytes'] / 1e9:.1f} GB)."
        )
    recovery = {dim: graphs[dim].get("recovery", {}) for dim in graphs}
    lines.append(f"Restart recovery: `{json.dumps(recovery, default=str)}`")
    c2f_rows = {
        f"C2F from the {dim}-d graph at recall@10 ≥ {points['recall_bar']}": (
            _point(entry["point"], "k′")
            + (f" (best recall {entry['best_recall']:.3f})" if entry["point"] is None else "")
            + f"; RAM ratio {_ratio_text(entry['ram_ratio'])}, "
            f"p50 ratio {_ratio_text(entry['c2f_p50_ratio'])}"
        )
        for dim, entry in points["c2f"].items()
    }
    plateau = points["coarse_plateau"]

    def baseline_point(row: dict | None) -> str:
        return _point(row, "ef") if plan["built"] else "not built (above)"

    lines.append(
        "Operating points (the smallest efSearch reaching the bar; for C2F, the grid's setting "
        "with the lowest index p50 reaching it; ratios are HNSW-256's over the route's):\n\n"
        + bullet_list(
            {
                **c2f_rows,
                f"HNSW-256 at recall@10 ≥ {points['recall_bar']}": baseline_point(
                    points["hnsw256_at_recall"]
                ),
                "best shortlist dim (least RAM reaching the bar)": points["best_shortlist_dim"]
                or "none reaches it",
                f"coarse at same-domain P@10 ≥ {points['domain_precision_bar']:.3f} (target bar)": (
                    _point(points["coarse"], "ef")
                    + (
                        ""
                        if points["coarse"]
                        else f" (best {plateau['coarse_best_domain_p10']:.3f})"
                    )
                ),
                f"HNSW-256 at same-domain P@10 ≥ {points['domain_precision_bar']:.3f}": (
                    baseline_point(points["hnsw256_at_domain_precision"])
                ),
                "coarse p50 ratio at the target bar": _ratio_text(points["coarse_p50_ratio"]),
            }
        )
    )
    lines.append(
        "Additional comparison, not a substitute for the target: coarse against HNSW-256 at "
        f"same-domain P@10 ≥ {plateau['level']:.3f} (the best coarse reaches, "
        f"{plateau['coarse_best_domain_p10']:.3f}, minus 0.005):\n\n"
        + bullet_list(
            {
                "coarse": _point(plateau["coarse"], "ef"),
                "HNSW-256": baseline_point(plateau["hnsw256"]),
                "HNSW-256 / coarse index p50": _ratio_text(plateau["p50_ratio"]),
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
    dims = ", ".join(map(str, settings["shortlist_dims"]))
    parts = [
        "# Scale: the tiered C2F collection against HNSW-256"
        + (" (smoke run)" if report["smoke"] else ""),
        f"Measured by `{report['command']}`. *Index* times (the comparisons) are the index work "
        "alone: the collection's 64-d graph search for coarse, shortlist plus exact re-rank from "
        "the vector file for C2F (the collection's own timings), the bare FAISS search for "
        "HNSW-256. *Call* times are the collection's `search` / `search_c2f` as the service "
        "calls them (query normalisation and the ids read from SQLite included). One query "
        f"per call, 1 FAISS thread, {settings['rounds']} round-robin rounds over every route and "
        f"setting. The collection's HNSW storage: {settings['storage']}; C2F shortlist dims: "
        f"{dims}. RAM per route is the anonymous RSS of a fresh process "
        "that opens the folder with only the graph that route needs (the others stay on disk), "
        "beside that graph's size by FAISS's accounting.",
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
    for column, size in enumerate(sizes):
        top, bottom = axes[0][column], axes[1][column]
        curves = {("coarse", None): ("coarse HNSW-64 (vs exact 64-d)", "tab:blue")}
        for number, dim in enumerate(sorted(size["points"]["c2f"], key=int)):
            colour = ("tab:green", "tab:olive", "tab:cyan")[number % 3]
            curves[("c2f", int(dim))] = (f"C2F {dim} → 256", colour)
        curves[("hnsw256", None)] = ("HNSW-256 fp32", "tab:red")
        for (route, dim), (label, colour) in curves.items():
            rows = [
                row
                for row in size["sweeps"]
                if row["route"] == route and row.get("shortlist_dim") == dim
            ]
            if not rows:
                continue
            if route == "c2f":  # a (k′, efSearch) grid: its fastest setting per recall
                rows = frontier(rows, "index_p50_us")
            p50 = [row["index_p50_us"] for row in rows]
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
        for axis in (top, bottom):
            axis.xaxis.set_minor_formatter(NullFormatter())
            axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
