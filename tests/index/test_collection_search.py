"""Collection search against direct numpy computations: cosine, C2F, SFS; writes; bad input."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from index import Collection, HnswParams, PqParams
from index.types import Hit


def cosine(queries: np.ndarray, docs: np.ndarray) -> np.ndarray:
    queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    docs = docs / np.linalg.norm(docs, axis=1, keepdims=True)
    return queries @ docs.T


def top_k(scores: np.ndarray, ids: list[str], k: int) -> list[list[tuple[str, float]]]:
    order = np.argsort(-scores, axis=1)[:, :k]
    return [
        [(ids[j], float(row[j])) for j in best] for row, best in zip(scores, order, strict=True)
    ]


def assert_same(hits: list[list[Hit]], expected: list[list[tuple[str, float]]]) -> None:
    assert [[hit.id for hit in row] for row in hits] == [[i for i, _ in row] for row in expected]
    np.testing.assert_allclose(
        [[hit.score for hit in row] for row in hits],
        [[s for _, s in row] for row in expected],
        atol=1e-5,
    )


@pytest.fixture
def corpus(rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    vectors = rng.standard_normal((300, 64)).astype(np.float32) * 3
    return [f"doc-{i}" for i in range(300)], vectors


def open_collection(path: Path, **kwargs) -> Collection:
    options = {"dim": 64, "prefix_dims": (16, 64), "index_kinds": ("exact",), **kwargs}
    return Collection(path, **options)


def test_exact_search_equals_numpy_brute_force(
    tmp_path: Path, rng: np.random.Generator, corpus: tuple[list[str], np.ndarray]
) -> None:
    ids, vectors = corpus
    collection = open_collection(tmp_path)
    collection.upsert(ids, ["text"] * len(ids), vectors)
    queries = rng.standard_normal((5, 64)).astype(np.float32)
    for dim in (16, 64):
        expected = top_k(cosine(queries[:, :dim], vectors[:, :dim]), ids, 10)
        assert_same(collection.search(queries, 10, dim).hits, expected)
    assert_same(
        collection.search(queries[:, :16], 10, 16).hits,
        top_k(cosine(queries[:, :16], vectors[:, :16]), ids, 10),
    )
    assert len(collection.search(queries[:1], 1000, 16).hits[0]) == 300


def test_c2f_with_a_large_factor_equals_exact_full_dimension_search(
    tmp_path: Path, rng: np.random.Generator, corpus: tuple[list[str], np.ndarray]
) -> None:
    ids, vectors = corpus
    collection = open_collection(tmp_path, index_kinds=("exact", "hnsw"))
    collection.upsert(ids, ["text"] * len(ids), vectors)
    queries = rng.standard_normal((5, 64)).astype(np.float32)
    expected = top_k(cosine(queries, vectors), ids, 10)
    result = collection.search_c2f(queries, 10, 16, factor=30)
    timings = result.timings
    assert_same(result.hits, expected)
    assert set(timings) == {"funnel"} and timings["funnel"] > 0
    assert_same(collection.search_c2f(queries, 10, 16, factor=30, kind="hnsw").hits, expected)
    # A small shortlist re-ranks only what the coarse prefix found: full-dim scores, its order.
    coarse_ids = {hit.id for hit in collection.search(queries[:1], 20, 16).hits[0]}
    narrow = collection.search_c2f(queries[:1], 10, 16, factor=2).hits[0]
    assert {hit.id for hit in narrow} <= coarse_ids
    assert [hit.score for hit in narrow] == sorted((hit.score for hit in narrow), reverse=True)
    full_scores = dict(zip(ids, cosine(queries[:1], vectors)[0], strict=True))
    np.testing.assert_allclose(
        [hit.score for hit in narrow], [full_scores[h.id] for h in narrow], atol=1e-5
    )


def test_sfs_index_ranks_and_scores_by_mean_fragment_cosine(
    tmp_path: Path,
    rng: np.random.Generator,
    corpus: tuple[list[str], np.ndarray],
    mean_fragment_cosine: Callable[[np.ndarray, np.ndarray, int], np.ndarray],
) -> None:
    ids, vectors = corpus
    collection = open_collection(tmp_path, fragment_dim=8)
    collection.upsert(ids, ["text"] * len(ids), vectors)
    queries = rng.standard_normal((4, 64)).astype(np.float32)
    for dim in (16, 64):
        scores = np.stack([mean_fragment_cosine(q[:dim], vectors[:, :dim], 8) for q in queries])
        expected = top_k(scores, ids, 10)
        assert_same(collection.search(queries, 10, dim, scoring="sfs").hits, expected)
    plain = collection.search(queries, 10, 64).hits
    assert [h.id for h in plain[0]] != [i for i, _ in expected[0]]  # SFS is not plain cosine


@pytest.mark.parametrize("kind", ["exact", "hnsw", "pq"])
def test_replace_and_delete_show_in_search_and_get(
    tmp_path: Path, corpus: tuple[list[str], np.ndarray], kind: str
) -> None:
    ids, vectors = corpus
    collection = open_collection(
        tmp_path, index_kinds=(kind,), pq=PqParams(m=4, nbits=4, min_train=100)
    )
    collection.upsert(ids, [f"text {i}" for i in ids], vectors, [{"n": n} for n in range(300)])
    target = vectors[7] + 0.01
    assert collection.search(target, 1, 64, kind).hits[0][0].id == "doc-7"
    # Replace doc-3 with doc-7's vector: both now match best; then delete doc-7.
    collection.upsert(["doc-3"], ["replaced"], vectors[7:8], [{"new": True}])
    found = {hit.id for hit in collection.search(target, 2, 64, kind).hits[0]}
    assert found == {"doc-3", "doc-7"}
    stored = collection.get("doc-3")
    assert stored is not None and stored.text == "replaced" and stored.metadata == {"new": True}
    np.testing.assert_array_equal(stored.vector, vectors[7])
    assert collection.delete(["doc-7", "never-there"]) == 1
    assert collection.get("doc-7") is None
    hits = collection.search(np.stack([target, vectors[3]]), 300, 64, kind).hits
    for row in hits:
        assert "doc-7" not in {hit.id for hit in row}
        assert [hit.id for hit in row].count("doc-3") == 1
    assert hits[0][0].id == "doc-3"
    stats = collection.stats()
    assert stats.documents == 299
    assert stats.indexes[f"cosine-64-{kind}"]["vectors"] == 299
    if kind == "pq":
        assert stats.indexes["cosine-64-pq"]["trained"]


def test_hits_are_named_from_memory_as_the_store_names_them(
    tmp_path: Path, corpus: tuple[list[str], np.ndarray]
) -> None:
    ids, vectors = corpus
    collection = open_collection(tmp_path, index_kinds=("exact", "hnsw"))
    collection.upsert(ids, [f"text {i}" for i in ids], vectors)
    collection.upsert(["doc-3", "new"], ["replaced", "added"], vectors[7:9])
    collection.delete(["doc-8", "doc-20"])
    queries = np.concatenate([vectors[:20], vectors[7:9]])

    def named(contents: bool) -> list[list[str]]:
        found = collection.search(queries, 40, 64, "hnsw", contents=contents).hits
        found += collection.search_c2f(queries, 40, 16, kind="hnsw", contents=contents).hits
        return [[hit.id for hit in row] for row in found]

    before = named(False)
    assert before == named(True)
    assert {"doc-3", "new"} <= set(before[-1]) and not {"doc-8", "doc-20"} & set(sum(before, []))
    collection.close()
    collection = open_collection(tmp_path, index_kinds=("exact", "hnsw"))
    assert named(False) == before


def test_hnsw_graphs_are_rebuilt_once_deletions_pass_the_threshold(
    tmp_path: Path, corpus: tuple[list[str], np.ndarray]
) -> None:
    ids, vectors = corpus
    collection = open_collection(
        tmp_path, index_kinds=("hnsw",), hnsw=HnswParams(max_deleted_fraction=0.25)
    )
    collection.upsert(ids, ["text"] * len(ids), vectors)
    collection.delete(ids[:60])
    assert collection.stats().indexes["cosine-64-hnsw"]["deleted"] == 60  # 20%: kept
    collection.delete(ids[60:90])
    for entry in collection.stats().indexes.values():
        assert entry["deleted"] == 0 and entry["vectors"] == 210
    hits = collection.search(vectors[90:100], 1, 64, "hnsw").hits
    assert [row[0].id for row in hits] == ids[90:100]


def test_stats_report_sizes_per_index_and_pq_training(
    tmp_path: Path, corpus: tuple[list[str], np.ndarray]
) -> None:
    ids, vectors = corpus
    collection = open_collection(
        tmp_path, index_kinds=("exact", "pq"), pq=PqParams(m=4, nbits=8, min_train=1000)
    )
    collection.upsert(ids, ["text"] * len(ids), vectors)
    indexes = collection.stats().indexes
    assert set(indexes) == {"cosine-16-exact", "cosine-16-pq", "cosine-64-exact", "cosine-64-pq"}
    assert indexes["cosine-64-pq"]["trained"] is False  # 300 < 1000: still exact
    assert indexes["cosine-16-exact"]["bytes"] < indexes["cosine-64-exact"]["bytes"]
    assert collection.stats().change_counter == 300


def test_pq_collection_uses_less_memory_than_exact_once_trained(
    tmp_path: Path, corpus: tuple[list[str], np.ndarray]
) -> None:
    ids, vectors = corpus
    collection = open_collection(
        tmp_path, index_kinds=("exact", "pq"), pq=PqParams(m=8, nbits=4, min_train=200)
    )
    collection.upsert(ids, ["text"] * len(ids), vectors)
    indexes = collection.stats().indexes
    assert indexes["cosine-64-pq"]["trained"] is True
    assert indexes["cosine-64-pq"]["bytes"] < indexes["cosine-64-exact"]["bytes"]
    assert all(len(row) == 5 for row in collection.search(vectors[:3], 5, 64, "pq").hits)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"prefix_dims": (16, 128)}, "prefix_dims must be a non-empty set of dims <= 64"),
        ({"prefix_dims": ()}, "prefix_dims must be a non-empty"),
        ({"prefix_dims": (0, 64)}, "every prefix dim must be a positive integer"),
        ({"index_kinds": ("flat",)}, "index_kinds must be some of exact, hnsw, pq"),
        ({"index_kinds": ("pq",), "pq": PqParams(m=12)}, "must divide the dimension 16"),
        ({"fragment_dim": 12}, "fragment_dim 12 must be a positive divisor of the dimension 16"),
    ],
)
def test_bad_configuration_is_refused(tmp_path: Path, options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        open_collection(tmp_path, **options)


def test_bad_writes_and_queries_are_refused_with_messages(
    tmp_path: Path, corpus: tuple[list[str], np.ndarray]
) -> None:
    ids, vectors = corpus
    collection = open_collection(tmp_path)
    collection.upsert(ids[:10], ["t"] * 10, vectors[:10])
    bad_calls = [
        (lambda: collection.upsert(["a"], ["t"], np.ones((1, 32))), r"shape \(n, 64\)"),
        (lambda: collection.upsert(["a", "b"], ["t"], np.ones((2, 64))), "same length"),
        (lambda: collection.upsert(["a"], ["t"], np.ones((1, 64)), [{}, {}]), "same length"),
        (lambda: collection.upsert([""], ["t"], np.ones((1, 64))), "non-empty strings"),
        (lambda: collection.upsert(["a", "a"], ["t", "t"], np.ones((2, 64))), "unique"),
        (lambda: collection.upsert(["é" * 40_000], ["t"], np.ones((1, 64))), "at most 65535 bytes"),
        (lambda: collection.upsert("ab", ["t", "t"], np.ones((2, 64))), "not a single string"),
        (lambda: collection.upsert(["a"], ["t"], np.full((1, 64), np.nan)), "NaN"),
        (lambda: collection.delete([""]), "non-empty strings"),
        (lambda: collection.search(np.ones(64), 0, 64), "k must be a positive integer"),
        (lambda: collection.search(np.ones(64), 5, 32), "no 'exact' index .* at dim 32"),
        (lambda: collection.search(np.ones(64), 5, 64, "hnsw"), "no 'hnsw' index"),
        (lambda: collection.search(np.ones(64), 5, 64, scoring="sfs"), "no 'exact' index"),
        (lambda: collection.search(np.ones(20), 5, 16), r"shape \(n, 16 or 64\)"),
        (lambda: collection.search(np.ones((1, 16)) * np.inf, 5, 16), "infinite"),
        (lambda: collection.search_c2f(np.ones(16), 5, 16), r"shape \(n, 64\)"),
        (lambda: collection.search_c2f(np.ones(64), 5, 16, factor=0), "factor must be"),
    ]
    for call, message in bad_calls:
        with pytest.raises(ValueError, match=message):
            call()
    assert collection.stats().documents == 10
