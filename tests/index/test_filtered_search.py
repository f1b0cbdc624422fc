"""Filtered search on every route and index kind, against brute-force filtered search.

N = 20,000 clustered 64-d vectors (prefixes 16, 32, 64; SFS fragments of 16), each with a
``bucket`` in 0..999 (a random permutation, so no bucket follows the vectors) and a ``parity``:
``bucket < 500 / 100 / 10 / 1`` keeps 50%, 10%, 1% and 0.1% of the documents (20 at 0.1%). Every
route (cosine at the coarse and fine prefixes, SFS, C2F from the 16-d prefix) with every index
kind (exact, HNSW float32, HNSW SQ8, PQ), at every selectivity, through both paths (the
selector and the exact subset, each forced) and the automatic choice, must return
``min(k, matches)`` hits, and reach recall@10 ≥ 0.99 against brute force over the matching
documents. One exception: a graph walk forced at 1% and 0.1% here (200 and 20 matching
documents; efSearch 1,280 and 4,048 reach recall 0.91-0.98) is only held to the hit count: the
policy answers so few matches exactly (:meth:`FilterParams.exact_subset_rows`, 5,400 rows at
this N), and the benchmark measures the walk there at 1M.

Brute force scores as the path does: the exact subset, and the selector over an exact or
float32 HNSW index, score exactly; the selector over PQ codes or SQ8 codes scores those codes,
so its brute force is over the index's decoded vectors (:meth:`VectorIndex.decoded`). C2F's
brute force is its own pipeline over the matching documents alone: the top ``k × factor`` by the
shortlist prefix's scores, re-ranked by full-vector cosine.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import faiss
import numpy as np
import pytest

from index import Collection, HnswParams, PqParams
from index.embedded import FilterParams
from index.faiss_indexes import HnswIndex
from index.filters import parse_filter
from index.fragments import fragment_unit
from index.rowset import RowSet
from index.vectors import prefix_unit, unit_rows

N = 20_000
DIM = 64
PREFIXES = (16, 32, 64)
FRAGMENT = 16
K = 10
FACTOR = 4
QUERIES = 60
SELECTIVITIES = {0.5: 500, 0.1: 100, 0.01: 10, 0.001: 1}
INDEX_PATHS = {"exact": "scan", "hnsw": "selector", "pq": "scan"}
MODES = {
    "selector": FilterParams(exact_subset_scale=0.0),
    "exact_subset": FilterParams(exact_subset_scale=1e9),
    "auto": FilterParams(),
}


@pytest.fixture(scope="module")
def data() -> dict:
    rng = np.random.default_rng(7)
    centres = rng.standard_normal((64, DIM)).astype(np.float32) * 1.5
    vectors = centres[rng.integers(0, 64, N)] + rng.standard_normal((N, DIM)).astype(np.float32)
    queries = centres[rng.integers(0, 64, QUERIES)] + rng.standard_normal((QUERIES, DIM))
    bucket = rng.permutation(N) % 1000
    return {
        "vectors": vectors.astype(np.float32),
        "queries": queries.astype(np.float32),
        "bucket": bucket,
        "metadata": [{"bucket": int(b), "parity": "even" if b % 2 == 0 else "odd"} for b in bucket],
    }


def _build(path: Path, data: dict, storage: str) -> Collection:
    collection = Collection(
        path,
        DIM,
        PREFIXES,
        index_kinds=("exact", "hnsw", "pq"),
        hnsw=HnswParams(m=16, ef_construction=80, storage=storage),
        pq=PqParams(m=8),
        fragment_dim=FRAGMENT,
    )
    ids = [str(i) for i in range(N)]
    for start in range(0, N, 5000):
        part = slice(start, start + 5000)
        collection.upsert(ids[part], ["text"] * 5000, data["vectors"][part], data["metadata"][part])
    return collection


@pytest.fixture(scope="module")
def collections(tmp_path_factory: pytest.TempPathFactory, data: dict) -> Iterator[dict]:
    """One collection with float32 HNSW graphs, one with SQ8 ones (both with exact and PQ)."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    built = {
        storage: _build(tmp_path_factory.mktemp(f"filtered-{storage}"), data, storage)
        for storage in ("flat", "sq8")
    }
    faiss.omp_set_num_threads(before)
    yield built
    for collection in built.values():
        collection.close()


def _space(scoring: str, dim: int, matrix: np.ndarray) -> np.ndarray:
    if scoring == "cosine":
        return prefix_unit(matrix, dim)
    return fragment_unit(matrix, dim, FRAGMENT)


def _top(queries: np.ndarray, docs: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    """Brute force: per query, the ``k`` best of ``rows`` by inner product (row ids)."""
    scores = queries @ docs.T
    return rows[np.argsort(-scores, axis=1, kind="stable")[:, :k]]


def _decoded(collection: Collection, scoring: str, dim: int, kind: str) -> np.ndarray:
    """The index's vectors as it scores them, by row (row r = document r - 1)."""
    ids, vectors = collection._indexes[f"{scoring}-{dim}-{kind}"].decoded()
    by_row = np.zeros((N + 1, dim), dtype=np.float32)
    by_row[ids] = vectors
    return by_row[1:]


def _recall(hits: list, truth: np.ndarray) -> float:
    found = [{int(hit.id) for hit in row} for row in hits]
    pairs = zip(found, truth, strict=True)
    return float(np.mean([len(ids & set(best.tolist())) / len(best) for ids, best in pairs]))


ROUTES = [
    ("coarse", "cosine", 16),
    ("fine", "cosine", 64),
    ("sfs", "sfs", 64),
    ("c2f", "cosine", 16),
]
KINDS = [("exact", "flat"), ("hnsw", "flat"), ("hnsw", "sq8"), ("pq", "flat")]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(("kind", "storage"), KINDS, ids=["exact", "hnsw", "hnsw-sq8", "pq"])
@pytest.mark.parametrize(("route", "scoring", "dim"), ROUTES, ids=[r[0] for r in ROUTES])
def test_filtered_search_matches_brute_force(
    collections: dict,
    data: dict,
    route: str,
    scoring: str,
    dim: int,
    kind: str,
    storage: str,
    mode: str,
) -> None:
    collection = collections[storage]
    collection.filters = MODES[mode]
    queries = data["queries"]
    unit = unit_rows(data["vectors"])
    for selectivity, below in SELECTIVITIES.items():
        where = parse_filter({"key": "bucket", "lt": below})
        matching = np.flatnonzero(data["bucket"] < below)
        assert len(matching) == selectivity * N
        if route == "c2f":
            result = collection.search_c2f(queries, K, dim, FACTOR, kind, where=where)
        else:
            result = collection.search(queries, K, dim, kind, scoring, where=where)
        hits, filtering = result.hits, result.filtering
        path = filtering["mode"]
        if mode != "auto":  # the index path: a graph walk with a selector, or a scan
            assert path == (mode if mode == "exact_subset" else INDEX_PATHS[kind])
        assert filtering["matching"] == len(matching)
        lossy = kind == "pq" or storage == "sq8"
        if route == "c2f" and path == "exact_subset":  # every match scored at the full dim
            truth = _top(unit_rows(queries), unit[matching], matching, K)
        elif route == "c2f":
            shortlist_docs = (
                _decoded(collection, scoring, dim, kind) if lossy else prefix_unit(unit, dim)
            )
            shortlists = _top(
                prefix_unit(queries, dim), shortlist_docs[matching], matching, K * FACTOR
            )
            full = unit_rows(queries)
            truth = np.stack(
                [_top(full[i : i + 1], unit[rows], rows, K)[0] for i, rows in enumerate(shortlists)]
            )
        else:
            docs = (
                _decoded(collection, scoring, dim, kind)
                if lossy and path != "exact_subset"
                else _space(scoring, dim, data["vectors"])
            )
            truth = _top(_space(scoring, dim, queries), docs[matching], matching, K)
        assert [len(row) for row in hits] == [min(K, len(matching))] * len(queries)
        for row in hits:
            assert all(data["bucket"][int(hit.id)] < below for hit in row)
        recall = _recall(hits, truth)
        if path == "selector" and kind == "hnsw" and selectivity < 0.1:
            continue  # a graph walk forced to find 200 or 20 needles; the policy never asks it
        assert recall >= 0.99, (route, kind, storage, mode, selectivity, path, recall, filtering)


def test_no_match_returns_no_hits_and_k_above_the_matches_returns_them_all(
    collections: dict, data: dict
) -> None:
    collection = collections["flat"]
    collection.filters = FilterParams()
    nothing = parse_filter({"key": "bucket", "gt": 5000})
    queries = data["queries"][:3]
    assert collection.search(queries, K, 16, "hnsw", where=nothing).hits == [[], [], []]
    assert collection.search_c2f(queries, K, 16, FACTOR, "hnsw", where=nothing).hits == [[], [], []]
    few = parse_filter({"key": "bucket", "eq": 7})  # 20 documents
    for mode in ("selector", "exact_subset"):
        collection.filters = MODES[mode]
        hits = collection.search(queries, 50, 64, "hnsw", where=few).hits
        assert [len(row) for row in hits] == [20, 20, 20]
        c2f = collection.search_c2f(queries, 50, 16, FACTOR, "hnsw", where=few).hits
        assert [len(row) for row in c2f] == [20, 20, 20]


def test_a_walk_that_finds_too_few_falls_back_to_the_exact_subset(
    collections: dict, data: dict
) -> None:
    """With no efSearch raise, a graph walk meets almost none of 20 matching documents; the
    queries it leaves short are answered exactly, and the report names them."""
    collection = collections["flat"]
    collection.filters = FilterParams(exact_subset_scale=0.0, hnsw_ef_max=1)
    where = parse_filter({"key": "bucket", "eq": 3})
    matching = np.flatnonzero(data["bucket"] == 3)
    result = collection.search(data["queries"], K, 64, "hnsw", ef_search=16, where=where)
    hits, filtering = result.hits, result.filtering
    assert filtering["mode"] == "selector" and filtering["ef_search"] == 16
    assert filtering["fallback"], filtering
    assert [len(row) for row in hits] == [K] * QUERIES
    truth = _top(
        prefix_unit(data["queries"], 64), prefix_unit(data["vectors"], 64)[matching], matching, K
    )
    assert _recall(hits, truth) == 1.0


def test_filters_see_every_write(tmp_path: Path, data: dict) -> None:
    """Upserts, replacements and deletes show in the next filtered search (the cache of
    resolved filters is dropped by every write), on the HNSW tombstone path too."""
    collection = Collection(tmp_path, DIM, (16, 64), index_kinds=("exact", "hnsw"))
    vectors = data["vectors"][:300]
    ids = [str(i) for i in range(300)]
    collection.upsert(ids, ["t"] * 300, vectors, [{"group": i % 3} for i in range(300)])
    query = vectors[:1]
    group0 = parse_filter({"key": "group", "eq": 0})
    for mode in ("selector", "exact_subset"):
        collection.filters = MODES[mode]
        hits = collection.search(query, 5, 64, "hnsw", where=group0).hits[0]
        assert hits[0].id == "0" and len(hits) == 5
    collection.upsert(["0"], ["t"], vectors[:1], [{"group": 1}])  # doc 0 leaves group 0
    collection.delete(["3"])
    for mode in ("selector", "exact_subset"):
        collection.filters = MODES[mode]
        for kind in ("exact", "hnsw"):
            hits = collection.search(query, 300, 64, kind, where=group0).hits[0]
            assert {hit.id for hit in hits} == {str(i) for i in range(6, 300, 3)}, (mode, kind)
            moved = collection.search(
                query, 1, 64, kind, where=parse_filter({"key": "group", "eq": 1})
            ).hits
            assert moved[0][0].id == "0"
    collection.close()


@pytest.mark.parametrize("order", ["ascending", "shuffled", "renumbered"])
def test_the_graph_walk_selects_by_row_whatever_order_the_nodes_are_in(order: str) -> None:
    """The walk tests a bitmap over node numbers, found from row ids however the nodes are
    numbered: rows added in ascending order (as the collection adds them), in any order, or
    renumbered for locality and then appended to."""
    rng = np.random.default_rng(3)
    vectors = unit_rows(rng.standard_normal((600, 16)).astype(np.float32))
    rows = np.arange(1, 601) if order != "shuffled" else rng.permutation(600) + 1
    index = HnswIndex(16, HnswParams(m=8, ef_construction=64, locality_from=400))
    index.add(rows[:400], vectors[:400])
    if order == "renumbered":
        renumbered = index.replacement()
        assert renumbered is not None and renumbered.ordered == 400
        assert not np.array_equal(renumbered._node_ids(), index._node_ids())
        index = renumbered
    allowed = RowSet(np.arange(3, 601, 3))
    index.search_filtered(vectors[:1], 10, allowed, ef_search=600)  # rows sorted for 400 nodes
    index.add(rows[400:], vectors[400:])
    queries = vectors[:8]
    scores, found = index.search_filtered(queries, 10, allowed, ef_search=600)
    by_row = np.zeros((601, 16), dtype=np.float32)
    by_row[rows] = vectors
    expected = _top(queries, by_row[allowed.rows], allowed.rows, 10)
    np.testing.assert_array_equal(found, expected)
    np.testing.assert_allclose(
        scores, np.sort(queries @ by_row[allowed.rows].T)[:, ::-1][:, :10], rtol=1e-5
    )
    index.remove(np.array([3, 6]))  # a new graph state: the bitmap is made again
    _, found = index.search_filtered(queries, 10, RowSet(np.arange(9, 601, 3)), ef_search=600)
    assert not np.isin(found, [3, 6]).any()


def test_the_filter_cache_keeps_within_its_budget_and_answers_the_same(
    collections: dict, data: dict
) -> None:
    collection = collections["flat"]
    collection.filters = FilterParams(cache_bytes=1)  # room for one filter at a time
    collection.clear_filter_cache()
    queries = data["queries"][:5]
    wheres = [parse_filter({"key": "bucket", "lt": below}) for below in (100, 10, 1)]
    first = [collection.search(queries, K, 64, "exact", where=where).hits for where in wheres]
    again = [collection.search(queries, K, 64, "exact", where=where).hits for where in wheres]
    assert first == again
    assert len(collection._filter_cache) == 1
    assert collection.rows_matching(wheres[-1]) is collection.rows_matching(wheres[-1])
