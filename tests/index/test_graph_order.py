"""HNSW graphs renumbered for locality: neighbours get nearby numbers, searches answer the same,
and the collection renumbers as its graphs grow, on open too."""

from __future__ import annotations

import logging
from pathlib import Path

import faiss
import numpy as np
import pytest

from index import Collection, HnswParams, PqParams
from index.faiss_indexes import HnswIndex, read_index
from index.graph_order import BottomLayer, locality_order, reordered
from index.vectors import unit_rows


def clustered(rng: np.random.Generator, n: int, dim: int = 16) -> np.ndarray:
    """Unit vectors around 40 centres, in random order (so insertion order has no locality)."""
    centres = rng.standard_normal((40, dim))
    points = centres[rng.integers(0, 40, n)] + 0.3 * rng.standard_normal((n, dim))
    return unit_rows(points.astype(np.float32))


def link_gap(graph: faiss.IndexHNSW) -> float:
    """The mean distance in node numbers between a node and its bottom-layer neighbours."""
    links = BottomLayer(graph).links(np.arange(graph.ntotal))
    nodes = np.repeat(np.arange(len(links)), links.shape[1]).reshape(links.shape)
    present = links >= 0
    return float(np.abs(links - nodes)[present].mean())


@pytest.mark.parametrize("storage", ["flat", "sq8"])
def test_a_renumbered_graph_answers_the_same_with_neighbours_numbered_close(storage: str) -> None:
    rng = np.random.default_rng(0)
    vectors = clustered(rng, 4000)
    rows = rng.permutation(4000).astype(np.int64) * 3 + 5
    index = HnswIndex(16, HnswParams(m=8, ef_construction=40, storage=storage, sq_train_size=1))
    index.add(rows, vectors)
    index = index.replacement() or index  # an SQ8 graph rebuilt with its codes trained
    assert index.trained and index._quantised == (storage == "sq8")
    original = index.faiss_index
    copy = reordered(original)
    order = locality_order(faiss.downcast_index(original.index))
    np.testing.assert_array_equal(np.sort(order), np.arange(4000))
    before = link_gap(faiss.downcast_index(original.index))
    after = link_gap(faiss.downcast_index(copy.index))
    assert after < 0.5 * before, (before, after)  # about n / 3 in random order
    queries = vectors[:64]
    params = faiss.SearchParametersHNSW()
    params.efSearch = 32
    scores, found = original.search(queries, 10, params=params)
    copy_scores, copy_found = copy.search(queries, 10, params=params)
    np.testing.assert_array_equal(copy_found, found)
    np.testing.assert_allclose(copy_scores, scores, rtol=1e-6)
    np.testing.assert_array_equal(np.sort(faiss.vector_to_array(copy.id_map)), np.sort(rows))


def test_the_graph_is_renumbered_from_its_threshold_and_again_after_growing_a_quarter(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rng = np.random.default_rng(1)
    vectors = clustered(rng, 1300)
    rows = np.arange(1300, dtype=np.int64)
    index = HnswIndex(16, HnswParams(m=8, ef_construction=40, locality_from=1000))
    index.add(rows[:999], vectors[:999])
    assert index.replacement() is None
    index.add(rows[999:1000], vectors[999:1000])
    index.remove(rows[:10])
    with caplog.at_level(logging.INFO, logger="index.graph_order"):
        renumbered = index.replacement()
    assert "a graph of 1000 nodes renumbered for locality in" in caplog.text
    assert renumbered is not None and renumbered.ordered == 1000
    assert renumbered.stats()["locality_ordered_nodes"] == 1000
    np.testing.assert_array_equal(renumbered.deleted_ids(), rows[:10])
    _, found = renumbered.search(vectors[:20], 5, ef_search=64)
    assert not np.isin(found, rows[:10]).any()
    renumbered.add(rows[1000:1019], vectors[1000:1019])
    assert renumbered.replacement(snapshot=True) is None  # 1,019 nodes: under 1.02 × 1,000
    renumbered.add(rows[1019:1249], vectors[1019:1249])
    assert renumbered.replacement() is None  # 1,249 nodes: not yet 1.25 × 1,000
    settled = renumbered.replacement(snapshot=True)  # before a snapshot, 2% more is enough
    assert settled is not None and settled.ordered == 1249
    renumbered.add(rows[1249:], vectors[1249:])
    again = renumbered.replacement()
    assert again is not None and again.ordered == 1300

    files = again.save(tmp_path / "g.faiss")
    loaded = read_index("hnsw", 16, tmp_path / "g.faiss", again.params, PqParams())
    assert isinstance(loaded, HnswIndex) and loaded.ordered == 1300
    assert loaded.replacement() is None
    files[-1].unlink()  # as saved before graphs had a locality record: renumbered once loaded
    older = read_index("hnsw", 16, tmp_path / "g.faiss", again.params, PqParams())
    assert isinstance(older, HnswIndex) and older.ordered == 0
    fresh = older.replacement()
    assert fresh is not None and fresh.ordered == 1300


def test_a_collection_opened_at_the_threshold_renumbers_its_graphs_and_says_so(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(2)
    vectors = clustered(rng, 600, 32)
    names = [f"d{i}" for i in range(600)]

    def collection(locality_from: int) -> Collection:
        hnsw = HnswParams(m=8, ef_construction=40, locality_from=locality_from)
        return Collection(tmp_path, 32, (8, 32), ("hnsw",), hnsw=hnsw)

    built = collection(10**9)
    built.upsert(names, names, vectors)
    expected = built.search(vectors[:20], 5, 32, "hnsw").hits
    built.snapshot()
    built.close()

    opened = collection(500)  # the snapshot still serves: the threshold decides no contents
    assert opened._recovery.loaded == ["cosine-32-hnsw", "cosine-8-hnsw"]
    assert opened.opened_with_work  # so the service snapshots the renumbered graphs
    graphs = [opened._indexes[name] for name in ("cosine-32-hnsw", "cosine-8-hnsw")]
    assert [graph.ordered for graph in graphs] == [600, 600]
    found = opened.search(vectors[:20], 5, 32, "hnsw").hits
    assert [[hit.id for hit in hits] for hits in found] == [
        [hit.id for hit in hits] for hits in expected
    ]
    opened.snapshot()
    opened.close()
    reopened = collection(500)
    assert not reopened.opened_with_work
    reopened.close()


def test_a_snapshot_renumbers_a_graph_grown_past_its_last_renumbering_and_writes_it(
    tmp_path: Path,
) -> None:
    vectors = clustered(np.random.default_rng(3), 700, 32)
    names = [f"d{i}" for i in range(700)]

    def collection() -> Collection:
        hnsw = HnswParams(m=8, ef_construction=40, locality_from=500)
        return Collection(tmp_path, 32, (32,), ("hnsw",), hnsw=hnsw)

    built = collection()
    built.upsert(names[:600], names[:600], vectors[:600])
    built.upsert(names[600:], names[600:], vectors[600:])
    assert built._indexes["cosine-32-hnsw"].ordered == 600  # 700: not yet 1.25 × 600
    expected = built.search(vectors[:20], 5, 32, "hnsw").hits
    built.snapshot()
    assert built._indexes["cosine-32-hnsw"].ordered == 700
    found = built.search(vectors[:20], 5, 32, "hnsw").hits
    assert [[hit.id for hit in hits] for hits in found] == [
        [hit.id for hit in hits] for hits in expected
    ]
    built.close()
    reopened = collection()
    assert reopened._indexes["cosine-32-hnsw"].ordered == 700
    assert not reopened.opened_with_work
    reopened.close()
