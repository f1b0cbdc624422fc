"""The Milvus backend's writes in chunks and its C2F, against a real ``milvus-lite`` server.

An upsert larger than :data:`index.milvus.params.UPSERT_CHUNK` is sent chunk by chunk, each chunk's
vector fields made just before it goes, and a document Milvus cannot hold stops the upsert
before anything is sent. C2F's shortlist search returns the shortlist's full vectors with it,
and the re-rank is the exact C2F pipeline (the best ``k × factor`` by cosine at the shortlist
prefix, re-ranked by full-dimension cosine): for one query, for queries split over several
search requests, and with a filter."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from benchmarks.harness.processes import MilvusServer
from index.backend import DocumentRefused
from index.filters import parse_filter
from index.milvus import MilvusCollection, MilvusConnection
from index.milvus import params as milvus_backend
from index.vectors import prefix_unit, unit_rows

DIM = 32
SHORTLIST_DIM = 8
DOCUMENTS = 400


@pytest.fixture(scope="module")
def corpus() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    return (
        rng.standard_normal((DOCUMENTS, DIM)).astype(np.float32),
        rng.standard_normal((9, DIM)).astype(np.float32),
    )


@pytest.fixture(scope="module")
def collection(
    milvus_server: MilvusServer, corpus: tuple[np.ndarray, np.ndarray]
) -> Iterator[MilvusCollection]:
    connection = MilvusConnection(milvus_server.uri, None, 30.0)
    collection = MilvusCollection(
        connection,
        f"c2f_{uuid.uuid4().hex[:12]}",
        dim=DIM,
        prefix_dims=(SHORTLIST_DIM, DIM),
        layout={SHORTLIST_DIM: ("exact", "hnsw"), DIM: ("exact",)},
        record={"name": "c2f", "bundle": "test", "bundle_hash": "0" * 64},
    )
    vectors, _ = corpus
    collection.upsert(
        [f"doc-{i}" for i in range(DOCUMENTS)],
        ["text"] * DOCUMENTS,
        vectors,
        [{"even": i % 2 == 0} for i in range(DOCUMENTS)],
    )
    try:
        yield collection
    finally:
        collection.drop()
        connection.close()


def expected_c2f(
    vectors: np.ndarray, query: np.ndarray, k: int, shortlist: int, rows: np.ndarray | None = None
) -> list[str]:
    """The exact C2F pipeline over ``rows`` (default: every document)."""
    rows = np.arange(len(vectors)) if rows is None else rows
    prefix = prefix_unit(vectors[rows], SHORTLIST_DIM) @ prefix_unit(query[None], SHORTLIST_DIM)[0]
    candidates = rows[np.argsort(-prefix, kind="stable")[:shortlist]]
    full = unit_rows(vectors[candidates]) @ unit_rows(query[None])[0]
    return [f"doc-{i}" for i in candidates[np.argsort(-full, kind="stable")[:k]]]


@pytest.mark.parametrize("kind", ["exact", "hnsw"])
def test_c2f_is_the_exact_pipeline(
    collection: MilvusCollection, corpus: tuple[np.ndarray, np.ndarray], kind: str
) -> None:
    vectors, queries = corpus
    result = collection.search_c2f(queries, 5, SHORTLIST_DIM, 4, kind, ef_search=400)
    found, timings = result.hits, result.timings
    for query, hits in zip(queries, found, strict=True):
        assert [hit.id for hit in hits] == expected_c2f(vectors, query, 5, 20)
        expected_scores = (
            unit_rows(vectors[[int(h.id[4:]) for h in hits]]) @ unit_rows(query[None])[0]
        )
        np.testing.assert_allclose([hit.score for hit in hits], expected_scores, atol=1e-5)
    assert timings["shortlist"] > 0 and timings["rerank"] > 0


def test_queries_split_over_several_searches(
    collection: MilvusCollection,
    corpus: tuple[np.ndarray, np.ndarray],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With room for two queries' shortlists per request, nine queries take five requests and
    each gets its own answer, in order."""
    vectors, queries = corpus
    monkeypatch.setattr(milvus_backend, "C2F_ROWS_PER_SEARCH", 40)
    found = collection.search_c2f(queries, 3, SHORTLIST_DIM, 6, "exact").hits
    assert [[hit.id for hit in hits] for hits in found] == [
        expected_c2f(vectors, query, 3, 18) for query in queries
    ]


def test_filtered_c2f_shortlists_matching_documents(
    collection: MilvusCollection, corpus: tuple[np.ndarray, np.ndarray]
) -> None:
    vectors, queries = corpus
    even = parse_filter({"key": "even", "eq": True})
    result = collection.search_c2f(queries[:3], 5, SHORTLIST_DIM, 4, "exact", where=even)
    found, filtering = result.hits, result.filtering
    rows = np.arange(0, DOCUMENTS, 2)
    for query, hits in zip(queries[:3], found, strict=True):
        assert [hit.id for hit in hits] == expected_c2f(vectors, query, 5, 20, rows)
    assert filtering["mode"] == "milvus"
    nothing = parse_filter({"key": "missing", "eq": 1})
    assert collection.search_c2f(queries[:2], 5, SHORTLIST_DIM, 4, "exact", where=nothing).hits == [
        [],
        [],
    ]


def test_an_upsert_goes_in_chunks_and_is_checked_first(
    milvus_server: MilvusServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(milvus_backend, "UPSERT_CHUNK", 64)
    connection = MilvusConnection(milvus_server.uri, None, 30.0)
    collection = MilvusCollection(
        connection,
        f"chunks_{uuid.uuid4().hex[:12]}",
        dim=DIM,
        prefix_dims=(SHORTLIST_DIM, DIM),
        layout={SHORTLIST_DIM: ("exact",), DIM: ("exact",)},
        record={"name": "chunks", "bundle": "test", "bundle_hash": "0" * 64},
    )
    try:
        vectors = np.random.default_rng(3).standard_normal((300, DIM)).astype(np.float32)
        ids = [f"doc-{i}" for i in range(300)]
        refused = [{"n": i} for i in range(299)] + [{"many": list(range(100))}]
        with pytest.raises(DocumentRefused) as refusal:
            collection.upsert(ids, ["text"] * 300, vectors, refused)
        assert refusal.value.position == 299
        assert collection.present(ids) == set()
        assert collection.upsert(ids, ["text"] * 300, vectors) == 300
        assert collection.present(ids) == set(ids)
        hits = collection.search(vectors[7], 1, DIM).hits[0]
        assert [hit.id for hit in hits] == ["doc-7"]
        assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    finally:
        collection.drop()
        connection.close()
