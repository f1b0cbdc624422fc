"""The Milvus backend against the embedded one, on a real ``milvus-lite`` server: the same hits
and scores on every route (exact kinds; HNSW at a beam wide enough to be exact on this size),
reads and deletes by free-text ids, and the refusals: another bundle's or another layout's
collection, kind ``pq`` on milvus-lite, a document Milvus cannot hold."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from benchmarks.harness.processes import MilvusServer
from index import Collection
from index.backend import DocumentRefused
from index.filters import parse_filter
from index.milvus import MilvusCollection, MilvusConnection

DIM, PREFIXES, FRAGMENT = 64, (16, 32, 64), 8
LAYOUT = {16: ("exact", "hnsw"), 32: ("exact", "hnsw"), 64: ("exact", "hnsw")}
RECORD = {"bundle": "test", "bundle_hash": "h" * 64}
N, K = 600, 10


@pytest.fixture(scope="module")
def connection(milvus_server: MilvusServer) -> Iterator[MilvusConnection]:
    connection = MilvusConnection(milvus_server.uri, None, 10.0)
    yield connection
    connection.close()


def _milvus(connection: MilvusConnection, name: str, **overrides: object) -> MilvusCollection:
    options: dict = {
        "dim": DIM,
        "prefix_dims": PREFIXES,
        "layout": LAYOUT,
        "record": RECORD,
        "fragment_dim": FRAGMENT,
    } | overrides
    return MilvusCollection(connection, name, **options)


@pytest.fixture(scope="module")
def data() -> tuple[list[str], np.ndarray, list[dict], np.ndarray]:
    rng = np.random.default_rng(7)
    ids = [f"doc {i} \"quoted\" 'é' \\ {i}" for i in range(N)]
    metadata = [{"group": i % 5, "tags": ["even" if i % 2 == 0 else "odd"]} for i in range(N)]
    return (
        ids,
        rng.standard_normal((N, DIM)).astype(np.float32),
        metadata,
        rng.standard_normal((20, DIM)).astype(np.float32),
    )


@pytest.fixture(scope="module")
def pair(
    connection: MilvusConnection, tmp_path_factory: pytest.TempPathFactory, data: tuple
) -> tuple[MilvusCollection, Collection]:
    """The same documents in both backends (tests that write use ids of their own)."""
    ids, vectors, metadata, _ = data
    texts = [f"text {i}" for i in range(N)]
    milvus = _milvus(connection, f"t{uuid.uuid4().hex[:12]}_default")
    milvus.upsert(ids, texts, vectors, metadata)
    embedded = Collection(
        tmp_path_factory.mktemp("embedded"),
        DIM,
        PREFIXES,
        index_kinds=("exact", "hnsw"),
        fragment_dim=FRAGMENT,
    )
    embedded.upsert(ids, texts, vectors, metadata)
    return milvus, embedded


def _same(got: list, expected: list) -> None:
    for got_row, expected_row in zip(got, expected, strict=True):
        assert [hit.id for hit in got_row] == [hit.id for hit in expected_row]
        np.testing.assert_allclose(
            [hit.score for hit in got_row], [hit.score for hit in expected_row], atol=1e-5
        )


@pytest.mark.parametrize("scoring", ["cosine", "sfs"])
@pytest.mark.parametrize("dim", PREFIXES)
def test_every_exact_route_equals_the_embedded_backend(
    pair: tuple, data: tuple, dim: int, scoring: str
) -> None:
    milvus, embedded = pair
    queries = data[3]
    _same(
        milvus.search(queries, K, dim, "exact", scoring).hits,
        embedded.search(queries, K, dim, "exact", scoring).hits,
    )
    if scoring == "cosine":  # HNSW with a beam far wider than the corpus: exact here
        hnsw = milvus.search(queries, K, dim, "hnsw", ef_search=N).hits
        _same(hnsw, embedded.search(queries, K, dim).hits)


def test_c2f_and_filters_equal_the_embedded_backend(pair: tuple, data: tuple) -> None:
    milvus, embedded = pair
    queries = data[3]
    c2f = milvus.search_c2f(queries, K, 16, 4, "exact").hits
    _same(c2f, embedded.search_c2f(queries, K, 16, 4, "exact").hits)
    where = parse_filter({"and": [{"key": "group", "in": [1, 2]}, {"key": "tags", "eq": "odd"}]})
    result = milvus.search(queries, K, 32, "exact", where=where)
    filtered, filtering = result.hits, result.filtering
    _same(filtered, embedded.search(queries, K, 32, "exact", where=where).hits)
    assert filtering == {"mode": "milvus", "matching": None}


def test_reads_replaces_and_deletes_by_free_text_id(pair: tuple, data: tuple) -> None:
    milvus, _ = pair
    ids = [f"extra {i} \"q\" 'é' \\ \n" for i in range(3)]
    milvus.upsert(ids, ["a", "b", "c"], data[1][:3], [{"n": i} for i in range(3)])
    first, missing = milvus.contents_of([ids[0], "no such id"])
    assert first is not None and (first.id, first.text, first.metadata) == (ids[0], "a", {"n": 0})
    assert missing is None
    milvus.upsert([ids[1]], ["replaced"], data[1][:1], [{"v": 2}])
    (replaced,) = milvus.contents_of([ids[1]])
    assert replaced is not None and (replaced.text, replaced.metadata) == ("replaced", {"v": 2})
    assert milvus.stats().documents == N + 3
    assert milvus.delete([ids[2], "no such id"]) == 1
    assert milvus.present(ids) == {ids[0], ids[1]}
    assert milvus.delete(ids) == 2
    assert milvus.stats().documents == N


def test_a_collection_of_another_bundle_or_layout_is_refused(
    connection: MilvusConnection, pair: tuple
) -> None:
    milvus, _ = pair
    with pytest.raises(ValueError, match="holds vectors of bundle"):
        _milvus(connection, milvus.name, record={**RECORD, "bundle_hash": "o" * 64})
    with pytest.raises(ValueError, match="has the vector fields"):
        _milvus(connection, milvus.name, layout={16: ("exact",), 32: ("exact",), 64: ("exact",)})
    assert _milvus(connection, milvus.name).stats().documents == N  # the same: reopened


def test_kind_pq_is_refused_on_milvus_lite(connection: MilvusConnection) -> None:
    with pytest.raises(ValueError, match="needs IVF_PQ, which .* does not build"):
        _milvus(connection, f"t{uuid.uuid4().hex[:12]}_default", layout={64: ("pq",)})


def test_a_document_milvus_cannot_hold_is_refused_whole(pair: tuple, data: tuple) -> None:
    milvus, _ = pair
    vectors = data[1][:2]
    before = milvus.stats().documents
    with pytest.raises(DocumentRefused, match="65,535") as refused:
        milvus.upsert(["new-a", "new-b"], ["fine", "x" * 70_000], vectors)
    assert (refused.value.position, refused.value.part) == (1, "text")
    with pytest.raises(DocumentRefused, match="at most 16") as refused:
        milvus.upsert(["new-a"], ["fine"], vectors[:1], [{"tags": list(range(17))}])
    assert refused.value.part == "metadata"
    assert milvus.stats().documents == before and not milvus.present(["new-a", "new-b"])
