"""The index kinds on their own: HNSW recall and tombstones, PQ fallback and training, loading."""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np
import pytest

from index.faiss_indexes import (
    SQ_QUANTIZERS,
    ExactIndex,
    HnswIndex,
    HnswParams,
    PqIndex,
    PqParams,
    create_index,
    read_index,
)
from index.vectors import unit_rows


def unit_vectors(rng: np.random.Generator, count: int, dim: int) -> np.ndarray:
    return unit_rows(rng.standard_normal((count, dim)).astype(np.float32))


def recall_at(found: np.ndarray, truth: np.ndarray) -> float:
    hits = sum(len(set(f) & set(t)) for f, t in zip(found, truth, strict=True))
    return hits / truth.size


@pytest.mark.parametrize("dim", [64, 256])
def test_hnsw_recall_at_10_is_at_least_0_9_at_default_params(
    rng: np.random.Generator, dim: int
) -> None:
    docs = unit_vectors(rng, 2000, dim)
    queries = unit_vectors(rng, 200, dim)
    ids = np.arange(2000, dtype=np.int64) + 10
    exact, hnsw = ExactIndex(dim), HnswIndex(dim, HnswParams())
    for index in (exact, hnsw):
        index.add(ids, docs)
    _, truth = exact.search(queries, 10)
    _, found = hnsw.search(queries, 10)
    recall = recall_at(found, truth)
    assert recall >= 0.9, f"HNSW recall@10 at {dim}-d is {recall:.3f}"


def test_hnsw_tombstones_are_never_returned_and_compaction_drops_them(
    rng: np.random.Generator,
) -> None:
    docs = unit_vectors(rng, 500, 32)
    ids = np.arange(500, dtype=np.int64)
    hnsw = HnswIndex(32, HnswParams(max_deleted_fraction=0.3))
    hnsw.add(ids, docs)
    removed = ids[:100]
    hnsw.remove(removed)
    assert len(hnsw) == 400 and hnsw.replacement() is None  # 20% deleted: below 30%
    _, found = hnsw.search(docs[:100], 10)  # the removed vectors themselves as queries
    assert not np.isin(found, removed).any()
    assert (found >= 0).all()  # still ten live results each
    hnsw.remove(ids[100:200])
    compacted = hnsw.replacement()
    assert compacted is not None
    assert len(compacted) == 300 and compacted.stats()["deleted"] == 0  # nothing left to hide
    _, found = compacted.search(docs[200:], 1)
    np.testing.assert_array_equal(found[:, 0], ids[200:])


def test_pq_answers_exactly_until_trained_then_quantises(rng: np.random.Generator) -> None:
    dim = 32
    params = PqParams(m=8, nbits=6, min_train=300)
    docs = unit_vectors(rng, 600, dim)
    ids = np.arange(600, dtype=np.int64)
    exact, pq = ExactIndex(dim), PqIndex(dim, params)
    exact.add(ids[:200], docs[:200])
    pq.add(ids[:200], docs[:200])
    assert not pq.stats()["trained"] and pq.replacement() is None
    np.testing.assert_array_equal(pq.search(docs[:5], 5)[1], exact.search(docs[:5], 5)[1])
    exact.add(ids[200:], docs[200:])
    pq.add(ids[200:], docs[200:])
    trained = pq.replacement()
    assert trained is not None and trained.stats()["trained"] and len(trained) == 600
    assert trained.nbytes() < exact.nbytes() / 3
    _, found = trained.search(docs[:50], 10)
    assert (found >= 0).all()
    _, truth = exact.search(docs[:50], 10)
    assert recall_at(found, truth) > 0.3  # coarse, but far above chance (10/600)
    trained.remove(ids[:10])
    assert len(trained) == 590
    assert not np.isin(trained.search(docs[:10], 5)[1], ids[:10]).any()


def test_pq_needs_m_to_divide_the_dimension() -> None:
    with pytest.raises(ValueError, match="m=12 sub-quantizers must divide the dimension 64"):
        PqIndex(64, PqParams(m=12))


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        (lambda: HnswParams(m=0), "must be >= 1"),
        (lambda: HnswParams(max_deleted_fraction=1.5), "max_deleted_fraction"),
        (lambda: PqParams(nbits=20), "nbits <= 16"),
        (lambda: PqParams(nbits=8, min_train=100), "at least 2\\*\\*nbits = 256"),
        (lambda: create_index("ivf", 8, HnswParams(), PqParams()), "unknown index kind 'ivf'"),
    ],
)
def test_bad_parameters_are_refused(factory, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        factory()


def test_saved_indexes_load_back_and_a_kind_mismatch_is_refused(
    rng: np.random.Generator, tmp_path: Path
) -> None:
    docs = unit_vectors(rng, 50, 16)
    ids = np.arange(50, dtype=np.int64)
    hnsw = HnswIndex(16, HnswParams())
    hnsw.add(ids, docs)
    hnsw.remove(ids[:5])
    files = hnsw.save(tmp_path / "h.faiss")
    assert [path.name for path in files] == ["h.faiss", "h.deleted.npy", "h.ordered.npy"]
    loaded = read_index("hnsw", 16, tmp_path / "h.faiss", HnswParams(), PqParams())
    assert len(loaded) == 45
    np.testing.assert_array_equal(loaded.search(docs, 3)[1], hnsw.search(docs, 3)[1])
    with pytest.raises(ValueError, match="does not hold a 16-d inner-product exact index"):
        read_index("exact", 16, tmp_path / "h.faiss", HnswParams(), PqParams())
    with pytest.raises(ValueError, match="does not hold a 8-d"):
        read_index("hnsw", 8, tmp_path / "h.faiss", HnswParams(), PqParams())


@pytest.mark.parametrize(
    ("storage", "code_bytes", "floor"),
    [("sq8", 64, 0.85), ("sq8u", 64, 0.85), ("sq4", 32, 0.6), ("tq4", 32, 0.6)],
)
def test_hnsw_sq_stores_floats_until_its_training_size_then_quantises(
    rng: np.random.Generator, tmp_path: Path, storage: str, code_bytes: int, floor: float
) -> None:
    docs = unit_vectors(rng, 2000, 64)
    queries = unit_vectors(rng, 200, 64)
    ids = np.arange(2000, dtype=np.int64)
    params = HnswParams(storage=storage, sq_train_size=1000)
    quantised = HnswIndex(64, params)
    quantised.add(ids[:500], docs[:500])
    assert not quantised.stats()["trained"] and quantised.bytes_per_vector() == 4 * 64
    assert quantised.replacement() is None  # 500 vectors: below the training size
    quantised.add(ids[500:], docs[500:])
    trained = quantised.replacement()
    assert trained is not None and len(trained) == 2000
    assert trained.stats()["trained"] and trained.bytes_per_vector() == code_bytes
    assert trained.replacement() is None
    assert trained.nbytes() < quantised.nbytes()  # a quarter (an eighth) of the vector bytes
    exact = ExactIndex(64)
    exact.add(ids, docs)
    _, truth = exact.search(queries, 10)
    _, found = trained.search(queries, 10)
    assert recall_at(found, truth) >= floor
    paths = trained.save(tmp_path / f"{storage}.faiss")
    loaded = read_index("hnsw", 64, paths[0], params, PqParams())
    assert loaded.stats()["trained"] and loaded.bytes_per_vector() == code_bytes
    storage_index = faiss.downcast_index(faiss.downcast_index(loaded.faiss_index.index).storage)
    assert storage_index.sq.qtype == SQ_QUANTIZERS[storage]  # the codes asked for, read back
    np.testing.assert_array_equal(loaded.search(queries, 10)[1], found)


def test_hnsw_size_is_counted_from_its_parts(rng: np.random.Generator) -> None:
    hnsw = HnswIndex(32, HnswParams())
    hnsw.add(np.arange(3000, dtype=np.int64), unit_vectors(rng, 3000, 32))
    serialised = len(faiss.serialize_index(hnsw._index))
    assert abs(hnsw.nbytes() - serialised) < 0.01 * serialised
