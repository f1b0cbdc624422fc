"""The native C2F funnel: one call that shortlists at a prefix and re-ranks at the full
dimension against the memory-mapped vector file, by row id, with gaps and filters, through FAISS
and through Fractal's own walk (the same answers)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from index.embedded.vector_file import VectorFile
from index.faiss_indexes import ExactIndex, HnswIndex, HnswParams
from index.funnel import Funnel
from index.rowset import RowSet
from index.vectors import prefix_unit, unit_rows

DIM, PREFIX, K = 48, 16, 5


@pytest.fixture
def rows_and_vectors(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """600 unit vectors at row ids with gaps (every third row id unused)."""
    rows = np.array([row for row in range(900) if row % 3], dtype=np.int64)
    return rows, unit_rows(rng.standard_normal((len(rows), DIM)).astype(np.float32))


def _file(tmp_path: Path, rows: np.ndarray, vectors: np.ndarray, dtype: str) -> VectorFile:
    file = VectorFile(tmp_path, DIM, dtype)
    file.write(rows, vectors)
    assert file.refine is not None and file.refine.ntotal >= rows.max() + 1
    return file


def _expected(
    queries: np.ndarray, shortlist: np.ndarray, rows: np.ndarray, vectors: np.ndarray
) -> list[list[int]]:
    """Each query's shortlisted rows re-ranked by exact full-dimension inner product."""
    by_row = dict(zip(rows.tolist(), vectors, strict=True))
    answer = []
    for query, candidates in zip(queries, shortlist, strict=True):
        kept = [row for row in candidates.tolist() if row >= 0]
        scores = [float(by_row[row] @ query) for row in kept]
        answer.append([kept[i] for i in np.argsort(scores)[::-1][:K]])
    return answer


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_funnel_re_ranks_the_prefix_shortlist_at_the_full_dimension(
    tmp_path: Path,
    rng: np.random.Generator,
    rows_and_vectors: tuple[np.ndarray, np.ndarray],
    dtype: str,
) -> None:
    rows, vectors = rows_and_vectors
    file = _file(tmp_path, rows, vectors, dtype)
    exact = ExactIndex(PREFIX)
    exact.add(rows, prefix_unit(vectors, PREFIX))
    assert file.refine is not None
    funnel = Funnel(exact, PREFIX, file.refine)
    queries = unit_rows(rng.standard_normal((8, DIM)).astype(np.float32))
    scores, found = funnel.search(queries, K, 4 * K)
    _, shortlist = exact.search(prefix_unit(queries, PREFIX), 4 * K)
    assert found.tolist() == _expected(queries, shortlist, rows, vectors)
    by_row = dict(zip(rows.tolist(), vectors, strict=True))
    exact_scores = [
        [float(by_row[row] @ query) for row in rows_found]
        for query, rows_found in zip(queries, found, strict=True)
    ]
    np.testing.assert_allclose(scores, exact_scores, atol=2e-3 if dtype == "float16" else 1e-5)


def test_the_funnel_normalises_queries_itself_and_a_zero_query_scores_zero(
    tmp_path: Path, rng: np.random.Generator, rows_and_vectors: tuple[np.ndarray, np.ndarray]
) -> None:
    rows, vectors = rows_and_vectors
    file = _file(tmp_path, rows, vectors, "float32")
    exact = ExactIndex(PREFIX)
    exact.add(rows, prefix_unit(vectors, PREFIX))
    assert file.refine is not None
    funnel = Funnel(exact, PREFIX, file.refine)
    unit = unit_rows(rng.standard_normal((6, DIM)).astype(np.float32))
    lengths = np.array([[0.01], [0.5], [1.0], [3.0], [40.0], [1e4]], dtype=np.float32)
    unit_scores, unit_found = funnel.search(unit, K, 4 * K)
    scores, found = funnel.search(np.ascontiguousarray(unit * lengths), K, 4 * K)
    assert found.tolist() == unit_found.tolist()
    np.testing.assert_allclose(scores, unit_scores, atol=1e-5)  # cosines, not scaled
    assert np.abs(scores).max() <= 1 + 1e-5
    zero_scores, zero_found = funnel.search(np.zeros((1, DIM), np.float32), K, 4 * K)
    assert (zero_found >= 0).all() and not zero_scores.any()


def test_the_funnel_walks_a_graph_with_a_selector_and_skips_tombstones(
    tmp_path: Path, rng: np.random.Generator, rows_and_vectors: tuple[np.ndarray, np.ndarray]
) -> None:
    rows, vectors = rows_and_vectors
    file = _file(tmp_path, rows, vectors, "float16")
    graph = HnswIndex(PREFIX, HnswParams(m=16))
    graph.add(rows, prefix_unit(vectors, PREFIX))
    removed = rows[:50]
    graph.remove(removed)
    assert file.refine is not None
    funnel = Funnel(graph, PREFIX, file.refine)
    queries = unit_rows(rng.standard_normal((10, DIM)).astype(np.float32))
    _, found = funnel.search(queries, K, 4 * K, 64)
    assert (found >= 0).all() and not np.isin(found, removed).any()
    allowed = RowSet(rows[rows % 2 == 0])
    _, filtered = funnel.search(queries, K, 4 * K, 64, allowed)
    assert (filtered >= 0).all() and (filtered % 2 == 0).all()


def test_one_parameter_object_serves_concurrent_searches_until_the_tombstones_change(
    tmp_path: Path, rng: np.random.Generator, rows_and_vectors: tuple[np.ndarray, np.ndarray]
) -> None:
    rows, vectors = rows_and_vectors
    file = _file(tmp_path, rows, vectors, "float16")
    graph = HnswIndex(PREFIX, HnswParams(m=16))
    graph.add(rows[:-100], prefix_unit(vectors[:-100], PREFIX))
    graph.remove(rows[:50])
    params = graph.search_parameters(64)
    assert graph.search_parameters(64) is params
    graph.add(rows[-100:], prefix_unit(vectors[-100:], PREFIX))  # after the selector was made
    assert file.refine is not None
    funnel = Funnel(graph, PREFIX, file.refine)
    queries = vectors[-100:]  # each finds its own row, added after the selector
    expected = [funnel.search(query[None, :], K, 4 * K, 64)[1] for query in queries]
    assert [int(found[0, 0]) for found in expected] == rows[-100:].tolist()

    def search_all(_: int) -> list[np.ndarray]:
        return [funnel.search(q[None, :], K, 4 * K, 64)[1] for q in queries]

    with ThreadPoolExecutor(4) as pool:
        for answers in pool.map(search_all, range(8)):
            assert all((a == e).all() for a, e in zip(answers, expected, strict=True))
    graph.remove(rows[-100:-50])
    assert graph.search_parameters(64) is not params
    _, found = funnel.search(queries, K, 4 * K, 64)
    assert not np.isin(found, rows[:50]).any() and not np.isin(found, rows[-100:-50]).any()
    assert found[50:, 0].tolist() == rows[-50:].tolist()


def test_an_exact_index_takes_no_selector() -> None:
    with pytest.raises(ValueError, match="filters by scan"):
        ExactIndex(PREFIX).search_parameters(None, RowSet(np.arange(3)))


def test_rows_written_after_the_mapping_are_scored_at_once(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    file = VectorFile(tmp_path, DIM, "float32")
    first = unit_rows(rng.standard_normal((10, DIM)).astype(np.float32))
    file.write(np.arange(10), first)
    refine = file.refine
    later = unit_rows(rng.standard_normal((5, DIM)).astype(np.float32))
    file.write(np.arange(10, 15), later)  # within the capacity: the same mapping
    assert file.refine is refine and refine is not None
    _, found = refine.search(later, 1)
    assert found[:, 0].tolist() == list(range(10, 15))
    np.testing.assert_array_equal(file.gather(np.arange(10, 15)), later)
