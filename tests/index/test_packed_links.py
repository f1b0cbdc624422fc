"""A graph's links packed for the native walk (index/packed_links.py and the C walk's packed
layout): they unpack to FAISS's graph, the walk answers as it does over FAISS's links, and a
graph that packed them adds, saves, renumbers and reopens as one that never did."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import faiss
import numpy as np
import pytest

from index import Collection, native_funnel, packed_links
from index.embedded.vector_file import VectorFile
from index.faiss_indexes import HnswIndex, HnswParams, PqParams, read_index
from index.funnel import Funnel
from index.rowset import RowSet
from index.vectors import prefix_unit, unit_rows

DIM, PREFIX = 64, 32

pytestmark = pytest.mark.skipif(
    native_funnel.kernels() is None and not os.environ.get("CI"),
    reason="the native walk is not built here",
)


def _vectors(rng: np.random.Generator, count: int) -> np.ndarray:
    centres = rng.standard_normal((20, DIM)).astype(np.float32)
    vectors = centres[rng.integers(0, 20, count)] + 0.6 * rng.standard_normal((count, DIM))
    return unit_rows(vectors.astype(np.float32))


def _graph(
    rng: np.random.Generator, storage: str = "sq8", count: int = 3000, packed: bool = True
) -> tuple[HnswIndex, np.ndarray, np.ndarray]:
    """A graph numbered for locality (as the collection keeps one from ``locality_from`` on),
    its rows (with gaps) and their full vectors."""
    vectors = _vectors(rng, count)
    rows = np.arange(count, dtype=np.int64) * 3 + 1
    params = HnswParams(m=16, storage=storage, locality_from=1000, packed_links=packed)
    graph = HnswIndex(PREFIX, params, training=prefix_unit(vectors, PREFIX))
    graph.add(rows, prefix_unit(vectors, PREFIX))
    fresh = graph.replacement()
    assert fresh is not None and fresh.ordered == count
    return fresh, rows, vectors


def _faiss_arrays(graph: HnswIndex) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    hnsw = faiss.downcast_index(graph.faiss_index.index).hnsw
    arrays = (hnsw.neighbors, hnsw.offsets, hnsw.levels)
    return tuple(faiss.vector_to_array(array).copy() for array in arrays)  # type: ignore[return-value]


def _lists(neighbors: np.ndarray, offsets: np.ndarray, width: int) -> np.ndarray:
    """Each node's bottom-level links as a sorted row (-1s first)."""
    return np.sort(neighbors[offsets[:-1, None].astype(np.int64) + np.arange(width)], axis=1)


def test_packed_links_unpack_to_the_same_graph(rng: np.random.Generator) -> None:
    graph, _, _ = _graph(rng)
    neighbors, offsets, levels = _faiss_arrays(graph)
    hnsw = faiss.downcast_index(graph.faiss_index.index).hnsw
    links = packed_links.pack(hnsw)
    assert links.width == 32 and links.nbytes < neighbors.nbytes / 2
    packed_links.release(hnsw)
    assert hnsw.neighbors.size() == hnsw.offsets.size() == hnsw.levels.size() == 0
    packed_links.restore(hnsw, links)
    restored = faiss.vector_to_array(hnsw.neighbors)
    np.testing.assert_array_equal(faiss.vector_to_array(hnsw.offsets), offsets)
    np.testing.assert_array_equal(faiss.vector_to_array(hnsw.levels), levels)
    np.testing.assert_array_equal(_lists(restored, offsets, 32), _lists(neighbors, offsets, 32))
    bottom = np.zeros(len(neighbors), dtype=bool)
    bottom[(offsets[:-1, None].astype(np.int64) + np.arange(32)).ravel()] = True
    np.testing.assert_array_equal(restored[~bottom], neighbors[~bottom])  # the upper levels


@pytest.mark.parametrize("storage", ["flat", "sq8"])
def test_the_walk_over_packed_links_answers_as_over_faiss_links(
    tmp_path: Path, rng: np.random.Generator, storage: str
) -> None:
    packed, rows, vectors = _graph(rng, storage)
    unpacked = HnswIndex(PREFIX, packed.params, packed.faiss_index)  # the same FAISS graph
    copy = faiss.clone_index(packed.faiss_index)
    plain = HnswIndex(PREFIX, packed.params, copy)
    queries = _vectors(rng, 50)
    file = VectorFile(tmp_path, DIM, "float16")
    file.write(rows, vectors)
    assert file.refine is not None
    expected = {ef: plain.search(prefix_unit(queries, PREFIX), 10, ef) for ef in (10, 40, 160)}
    allowed = RowSet(rows[rng.random(len(rows)) < 0.3])
    expected_filtered = plain.search_filtered(prefix_unit(queries, PREFIX), 10, allowed, 80)
    expected_funnel = Funnel(plain, PREFIX, file.refine).search(queries, 10, 40, 40)

    packed.seal()
    assert packed.stats()["links_packed"]
    vectors_and_ids = len(rows) * (packed.bytes_per_vector() + 8)
    links = packed.nbytes() - vectors_and_ids
    assert 0 < links < (plain.nbytes() - vectors_and_ids) / 3
    for ef, (scores, found) in expected.items():
        got_scores, got = packed.search(prefix_unit(queries, PREFIX), 10, ef)
        np.testing.assert_array_equal(got, found)
        np.testing.assert_allclose(got_scores, scores, rtol=1e-5, atol=1e-6)
    got = packed.search_filtered(prefix_unit(queries, PREFIX), 10, allowed, 80)[1]
    np.testing.assert_array_equal(got, expected_filtered[1])
    assert np.isin(got[got >= 0], allowed.rows).all()
    np.testing.assert_array_equal(
        Funnel(packed, PREFIX, file.refine).search(queries, 10, 40, 40)[1], expected_funnel[1]
    )
    del unpacked


def test_a_packed_graph_adds_and_saves_as_one_that_never_packed(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    packed, rows, _ = _graph(rng)
    plain = HnswIndex(PREFIX, packed.params, faiss.clone_index(packed.faiss_index))
    packed.seal()
    saved = packed.save(tmp_path / "graph.faiss")
    assert packed.stats()["links_packed"]  # packed again once written
    loaded = read_index("hnsw", PREFIX, saved[0], packed.params, PqParams())
    queries = prefix_unit(_vectors(rng, 40), PREFIX)
    np.testing.assert_array_equal(
        loaded.search(queries, 10, 64)[1], plain.search(queries, 10, 64)[1]
    )

    more = prefix_unit(_vectors(rng, 500), PREFIX)
    ids = np.arange(500, dtype=np.int64) * 3 + 2
    packed.add(ids, more)
    plain.add(ids, more)
    assert not packed.stats()["links_packed"]
    np.testing.assert_array_equal(
        packed.search(queries, 10, 64)[1], plain.search(queries, 10, 64)[1]
    )
    packed.seal()
    np.testing.assert_array_equal(
        packed.search(queries, 10, 64)[1], plain.search(queries, 10, 64)[1]
    )
    renumbered = packed._renumbered()  # reads FAISS's links: they come back
    np.testing.assert_array_equal(
        renumbered.search(queries, 10, 64)[1], plain.search(queries, 10, 64)[1]
    )


@pytest.mark.parametrize(
    "params",
    [
        HnswParams(m=16, storage="sq4", locality_from=1000, packed_links=True),
        HnswParams(m=16, storage="sq8", locality_from=1000, packed_links=True, native_walk=False),
        HnswParams(m=16, storage="sq8", locality_from=1000, packed_links=False),
    ],
    ids=["faiss-walks-sq4", "native-walk-off", "not-asked"],
)
def test_only_a_natively_walked_graph_asked_to_packs_its_links(
    rng: np.random.Generator, params: HnswParams
) -> None:
    vectors = prefix_unit(_vectors(rng, 1500), PREFIX)
    graph = HnswIndex(PREFIX, params, training=vectors)
    graph.add(np.arange(1500, dtype=np.int64), vectors)
    graph.seal()
    assert not graph.stats()["links_packed"]


def test_a_collection_packs_its_graph_when_opened_and_after_a_snapshot(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    params = HnswParams(m=16, packed_links=True)

    def packed(collection: Collection) -> bool:
        return bool(collection.stats().indexes["cosine-32-hnsw"].details["links_packed"])

    def ids(collection: Collection, queries: np.ndarray) -> list[list[str]]:
        hits = collection.search(queries, 5, 32, "hnsw").hits
        return [[hit.id for hit in row] for row in hits]

    collection = Collection(tmp_path, DIM, (32, DIM), ("hnsw",), hnsw=params)
    vectors = _vectors(rng, 400)
    collection.upsert([f"d{i}" for i in range(400)], ["text"] * 400, vectors)
    assert not packed(collection)  # written to: FAISS's links
    before = ids(collection, vectors[:8])
    collection.snapshot()
    assert packed(collection) and ids(collection, vectors[:8]) == before
    collection.upsert(["late"], ["text"], vectors[:1])
    assert not packed(collection)
    collection.close()

    reopened = Collection(tmp_path, DIM, (32, DIM), ("hnsw",), hnsw=params)
    assert packed(reopened)
    assert reopened.get("late") is not None
    assert ids(reopened, vectors[1:8]) == before[1:]


def test_the_walk_refuses_packed_links_that_do_not_fit_the_graph(rng: np.random.Generator) -> None:
    graph, _, _ = _graph(rng, count=1200)
    mapped = graph.faiss_index
    links = packed_links.pack(faiss.downcast_index(mapped.index).hnsw)
    with pytest.raises(ValueError, match="do not agree"):
        native_funnel.native_graph(mapped, None, replace(links, starts=links.starts[:-1]))
    with pytest.raises(ValueError, match="do not agree"):
        native_funnel.native_graph(mapped, None, replace(links, packed=links.packed[:-9]))
