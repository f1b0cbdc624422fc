"""Fractal's own funnel walk (index/native_funnel.c): the answers FAISS's ``IndexRefine`` gives
over the same graph and file, and FAISS's own search of the graph for the walk alone, with
tombstones, filters and concurrent searches, on every kernel this CPU runs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from index import native_funnel
from index.embedded.vector_file import VectorFile
from index.faiss_indexes import HnswIndex, HnswParams
from index.funnel import Funnel
from index.rowset import RowSet
from index.vectors import prefix_unit, unit_rows

DIM, PREFIX, K, SHORTLIST = 64, 32, 10, 40

pytestmark = pytest.mark.skipif(
    native_funnel.kernels() is None and not os.environ.get("CI"),
    reason="the native funnel is not built here",
)


@pytest.fixture(params=["best", "portable"])
def kernels(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each search below on the CPU's best kernels and on the portable C ones."""
    module = native_funnel._NATIVE
    assert module is not None
    name = module.use_kernels(request.param)
    yield name
    module.use_kernels("best")


def _collection(
    tmp_path: Path, rng: np.random.Generator, storage: str, dtype: str, count: int = 3000
) -> tuple[HnswIndex, VectorFile, np.ndarray, np.ndarray]:
    """A graph of ``storage`` codes over clustered unit vectors at row ids with gaps, and the
    vector file of their full rows."""
    centres = rng.standard_normal((20, DIM)).astype(np.float32)
    vectors = centres[rng.integers(0, 20, count)] + 0.6 * rng.standard_normal((count, DIM))
    vectors = unit_rows(vectors.astype(np.float32))
    rows = np.arange(count, dtype=np.int64) * 3 + 1
    file = VectorFile(tmp_path, DIM, dtype)
    file.write(rows, vectors)
    prefixes = prefix_unit(vectors, PREFIX)
    graph = HnswIndex(PREFIX, HnswParams(m=16, storage=storage), training=prefixes)
    graph.add(rows, prefixes)
    return graph, file, rows, vectors


def _both(graph: HnswIndex, file: VectorFile) -> tuple[Funnel, Funnel]:
    assert file.refine is not None
    native, faiss_funnel = (
        Funnel(graph, PREFIX, file.refine),
        Funnel(graph, PREFIX, file.refine, native=False),
    )
    assert native.native and not faiss_funnel.native
    return native, faiss_funnel


def _agree(
    first: tuple[np.ndarray, np.ndarray], second: tuple[np.ndarray, np.ndarray], share: float
) -> None:
    """The same rows in at least ``share`` of the places, and the same score wherever the row
    is the same (the walks differ only by rounding in the 8-bit scores)."""
    same = first[1] == second[1]
    assert same.mean() >= share
    np.testing.assert_allclose(first[0][same], second[0][same], atol=1e-5)


@pytest.mark.parametrize("storage", ["flat", "sq8", "sq8u"])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_the_native_walk_answers_as_faiss_does(
    tmp_path: Path, rng: np.random.Generator, storage: str, dtype: str, kernels: str
) -> None:
    graph, file, rows, vectors = _collection(tmp_path, rng, storage, dtype)
    native, faiss_funnel = _both(graph, file)
    queries = rng.standard_normal((200, DIM)).astype(np.float32)  # any norm
    for ef in (16, 64):
        found = native.search(queries, K, SHORTLIST, ef)
        _agree(found, faiss_funnel.search(queries, K, SHORTLIST, ef), 0.99)
        by_row = dict(zip(rows.tolist(), vectors, strict=True))
        exact = [
            [float(by_row[row] @ query) for row in hits]
            for query, hits in zip(unit_rows(queries), found[1], strict=True)
        ]
        np.testing.assert_allclose(found[0], exact, atol=2e-3 if dtype == "float16" else 1e-5)
        assert (np.diff(found[0], axis=1) <= 0).all()  # best first


def test_the_native_walk_skips_tombstones_and_keeps_to_a_filter(
    tmp_path: Path, rng: np.random.Generator, kernels: str
) -> None:
    graph, file, rows, vectors = _collection(tmp_path, rng, "sq8", "float16")
    removed = rows[::7]
    graph.remove(removed)
    native, faiss_funnel = _both(graph, file)
    queries = vectors[:100]  # each query's own row is removed for every seventh
    found = native.search(queries, K, SHORTLIST, 32)
    assert (found[1] >= 0).all() and not np.isin(found[1], removed).any()
    _agree(found, faiss_funnel.search(queries, K, SHORTLIST, 32), 0.99)
    allowed = RowSet(rows[(rows // 3) % 4 == 0])
    filtered = native.search(queries, K, SHORTLIST, 64, allowed)
    assert (filtered[1] >= 0).all() and np.isin(filtered[1], allowed.rows).all()
    _agree(filtered, faiss_funnel.search(queries, K, SHORTLIST, 64, allowed), 0.99)


@pytest.mark.parametrize("storage", ["flat", "sq8", "sq8u"])
def test_the_graphs_own_search_is_the_native_walk_alone_answering_as_faiss_does(
    tmp_path: Path, rng: np.random.Generator, storage: str, kernels: str
) -> None:
    graph, _, rows, _ = _collection(tmp_path, rng, storage, "float16")
    removed = rows[::7]
    graph.remove(removed)
    queries = prefix_unit(rng.standard_normal((200, DIM)).astype(np.float32), PREFIX)
    for ef in (16, 64):
        found = graph.search(queries, K, ef)
        by_faiss = graph.faiss_index.search(queries, K, params=graph.search_parameters(ef))
        _agree(found, by_faiss, 0.99)
        assert (found[1] >= 0).all() and not np.isin(found[1], removed).any()
        assert (np.diff(found[0], axis=1) <= 0).all()  # best first
    through_faiss = HnswIndex(
        PREFIX, HnswParams(m=16, storage=storage, native_walk=False), graph.faiss_index, removed
    )
    np.testing.assert_array_equal(through_faiss.search(queries, K, 64)[1], by_faiss[1])
    graph.remove(rows)
    scores, found = graph.search(queries[:2], K, 32)
    assert (found == -1).all() and np.isneginf(scores).all()


def test_a_short_answer_is_padded_and_a_graph_of_tombstones_returns_nothing(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    graph, file, rows, vectors = _collection(tmp_path, rng, "sq8", "float16", count=400)
    native, _ = _both(graph, file)
    few = RowSet(rows[:3])
    scores, found = native.search(vectors[:2], K, SHORTLIST, 400, few)
    assert sorted(found[0, :3].tolist()) == rows[:3].tolist()
    assert (found[:, 3:] == -1).all() and np.isneginf(scores[:, 3:]).all()
    graph.remove(rows)
    scores, found = native.search(vectors[:2], K, SHORTLIST, 32)
    assert (found == -1).all() and np.isneginf(scores).all()


def test_the_view_follows_the_graph_as_it_grows_and_serves_concurrent_searches(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    graph, file, rows, vectors = _collection(tmp_path, rng, "sq8", "float32")
    more = unit_rows(rng.standard_normal((500, DIM)).astype(np.float32))
    more_rows = np.arange(500, dtype=np.int64) * 3 + int(rows.max()) + 3
    file.write(more_rows, more)  # in the file before the funnel maps it
    native, _ = _both(graph, file)
    before = native.search(more, K, SHORTLIST, 64)
    assert not np.isin(before[1], more_rows).any()
    graph.add(more_rows, prefix_unit(more, PREFIX))  # FAISS may move the graph's arrays
    expected = native.search(more, K, SHORTLIST, 64)
    assert (expected[1][:, 0] == more_rows).mean() >= 0.98  # each finds its own new row

    def search_all(_: int) -> np.ndarray:
        return np.concatenate([native.search(q[None, :], K, SHORTLIST, 64)[1] for q in more])

    with ThreadPoolExecutor(4) as pool:
        for answers in pool.map(search_all, range(8)):
            np.testing.assert_array_equal(answers, expected[1])


def test_graphs_the_native_walk_does_not_read_go_through_faiss(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    vectors = unit_rows(rng.standard_normal((300, DIM)).astype(np.float32))
    rows = np.arange(300, dtype=np.int64)
    file = VectorFile(tmp_path, DIM, "float16")
    file.write(rows, vectors)
    assert file.refine is not None
    for storage in ("sq4", "tq4"):
        params = HnswParams(m=16, storage=storage)
        graph = HnswIndex(PREFIX, params, training=prefix_unit(vectors, PREFIX))
        graph.add(rows, prefix_unit(vectors, PREFIX))
        funnel = Funnel(graph, PREFIX, file.refine)
        assert not funnel.native
        _, found = funnel.search(vectors[:5], K, SHORTLIST, 64)
        assert found[:, 0].tolist() == rows[:5].tolist()


def test_the_native_call_refuses_what_it_cannot_read(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    graph, file, row_ids, vectors = _collection(tmp_path, rng, "sq8", "float16", count=300)
    assert file.refine is not None
    view = native_funnel.native_graph(graph.faiss_index, file.refine)
    scores, rows = np.empty((1, K), np.float32), np.empty((1, K), np.int64)
    queries = vectors[:1]
    with pytest.raises(ValueError, match="queries: expected float32 rows of 64 values"):
        view.search(queries.astype(np.float64), K, SHORTLIST, 32, None, scores, rows)
    with pytest.raises(ValueError, match="queries"):
        view.search(queries[:, :32].copy(), K, SHORTLIST, 32, None, scores, rows)
    with pytest.raises(ValueError, match="k <= shortlist"):
        view.search(queries, K, K - 1, 32, None, scores, rows)
    with pytest.raises(ValueError, match="rows: expected 10 items"):
        view.search(queries, K, SHORTLIST, 32, None, scores, rows[:, :5].copy())
    with pytest.raises(ValueError, match="a bit for every node"):
        view.search(queries, K, SHORTLIST, 32, np.zeros(3, np.uint8), scores, rows)
    with pytest.raises(ValueError, match="do not agree in size"):
        native_funnel._NATIVE.Graph(
            neighbors=np.zeros(10, np.int32),
            offsets=np.zeros(3, np.uint64),
            levels=[0, 4],
            entry_point=0,
            max_level=0,
            codes=np.zeros(64, np.uint8),
            vmin=np.zeros(32, np.float32),
            vdiff=np.ones(32, np.float32),
            ids=np.zeros(3, np.int64),
            rows=np.zeros((3, 64), np.float16),
        )
    view.search(queries, K, SHORTLIST, 32, None, scores, rows)  # still answers
    assert rows[0, 0] == row_ids[0]
