"""LangChain's Embeddings and VectorStore over a real service on the tiny bundle: ingest with
metadata and ids, search at both granularities and with C2F, filters, named collections,
delete, ``from_texts``, embeddings (sync and async), and API keys.

One service serves the module, with a key required and 4 texts a request, so that every call
sends the key and ingest and embedding are cut into batches. The tiny bundle's vectors are a
bag of characters: the texts here share no character, so a text's nearest document is its own.
Tests that store the same texts use collections of their own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("langchain_core")

from langchain_core.documents import Document  # noqa: E402

from client import FractalClient, RequestRefused  # noqa: E402
from client.langchain_store import FractalEmbeddings, FractalVectorStore  # noqa: E402
from tests.servers import start_server  # noqa: E402
from tests.tiny_bundle import DIM  # noqa: E402

KEY = "langchain-store-test-key-0001"
MAX_TEXTS = 4
TEXTS = ["aaa bbb ccc", "xxx yyy zzz", "111 222 333", "mmm nnn ooo", "ppp qqq rrr", "ddd eee fff"]


@pytest.fixture(scope="module")
def service(tiny_bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("langchain")
    server = start_server(
        tiny_bundle_dir,
        directory / "index",
        directory / "service.log",
        api_keys=KEY,
        max_texts=str(MAX_TEXTS),
    )
    try:
        yield server.base_url
    finally:
        server.shut_down()


@pytest.fixture
def store(service: str) -> Iterator[FractalVectorStore]:
    """A store of the default collection."""
    with FractalVectorStore(service, api_key=KEY) as store:
        yield store


def _create_collection(service: str, name: str) -> None:
    with FractalClient(service, api_key=KEY) as client:
        client.request("POST", "/collections", json={"name": name})


def test_a_text_finds_its_own_document_first(store: FractalVectorStore) -> None:
    metadatas = [{"source": "search", "n": position} for position in range(len(TEXTS))]
    ids = [f"search-{position}" for position in range(len(TEXTS))]
    assert store.add_texts(TEXTS, metadatas, ids=ids) == ids  # two requests of at most 4

    for granularity in ("coarse", "fine"):
        for position, text in enumerate(TEXTS):
            hits = store.similarity_search_with_score(text, k=3, granularity=granularity)
            assert len(hits) == 3
            document, score = hits[0]
            assert (document.id, document.page_content) == (ids[position], text)
            assert document.metadata == metadatas[position]
            assert score == pytest.approx(1.0, abs=1e-3)
            scores = [score for _, score in hits]
            assert scores == sorted(scores, reverse=True)
    c2f = store.similarity_search(TEXTS[2], k=2, granularity="fine", rerank="c2f")
    assert c2f[0].id == ids[2]
    with FractalVectorStore(store.url, api_key=KEY, granularity="coarse") as coarse_store:
        assert coarse_store.similarity_search(TEXTS[3], k=1)[0].id == ids[3]

    with pytest.raises(RequestRefused) as refused:
        store.similarity_search(TEXTS[0], granularity="medium")
    assert refused.value.status_code == 422 and "granularity" in refused.value.message


def test_a_metadata_filter_keeps_only_matching_documents(service: str) -> None:
    _create_collection(service, "langchain-filter")
    topics = ["filter-a", "filter-b"] * 3
    ids = [f"filter-{position}" for position in range(len(TEXTS))]
    with FractalVectorStore(service, api_key=KEY, collection="langchain-filter") as store:
        store.add_texts(TEXTS, [{"topic": topic} for topic in topics], ids=ids)

        only_b = {"key": "topic", "eq": "filter-b"}
        hits = store.similarity_search(TEXTS[0], k=10, filter=only_b)
        assert sorted(hit.id or "" for hit in hits) == ["filter-1", "filter-3", "filter-5"]
        assert all(hit.metadata == {"topic": "filter-b"} for hit in hits)
        either = {"key": "topic", "in": ["filter-a", "filter-b"]}
        for granularity in ("coarse", "fine"):
            hits = store.similarity_search(TEXTS[5], k=10, filter=either, granularity=granularity)
            assert hits[0].id == "filter-5"
            assert sorted(hit.id or "" for hit in hits) == sorted(ids)

        with pytest.raises(RequestRefused) as refused:
            store.similarity_search(TEXTS[0], filter={"key": "topic", "near": "filter-a"})
        assert refused.value.status_code == 422 and "near" in refused.value.message


def test_langchain_documents_and_retriever(service: str) -> None:
    _create_collection(service, "langchain-documents")
    documents = [
        Document(page_content=TEXTS[1], metadata={"source": "documents"}, id="documents-1"),
        Document(page_content=TEXTS[4], metadata={"source": "documents"}, id="documents-4"),
    ]
    with FractalVectorStore(service, api_key=KEY, collection="langchain-documents") as store:
        assert store.add_documents(documents) == ["documents-1", "documents-4"]
        assert store.get_by_ids(["documents-4", "missing", "documents-1"]) == documents[::-1]
        retriever = store.as_retriever(search_kwargs={"k": 1, "granularity": "coarse"})
        assert retriever.invoke(TEXTS[4]) == [documents[1]]


def test_a_named_collection(service: str, store: FractalVectorStore) -> None:
    _create_collection(service, "langchain-news")
    news = FractalVectorStore(service, api_key=KEY, collection="langchain-news")
    ids = news.add_texts(TEXTS[:3], [{"desk": "news"}] * 3, ids=["news-0", "news-1", "news-2"])

    assert news.similarity_search(TEXTS[1], k=1)[0].id == "news-1"
    assert store.similarity_search(TEXTS[1], k=1, collection="langchain-news")[0].id == "news-1"
    assert "news-1" not in {hit.id for hit in store.similarity_search(TEXTS[1], k=10)}
    assert store.get_by_ids(ids) == []
    assert [document.id for document in news.get_by_ids(ids)] == ids

    assert store.delete(["news-0"], collection="langchain-news") is True
    assert [document.id for document in news.get_by_ids(ids)] == ["news-1", "news-2"]
    news.close()

    missing = FractalVectorStore(service, api_key=KEY, collection="langchain-missing")
    with pytest.raises(RequestRefused) as refused:  # a missing collection is not skipped
        missing.get_by_ids(["news-1"])
    assert refused.value.status_code == 404 and "langchain-missing" in refused.value.message
    missing.close()


def test_a_deleted_document_is_gone(store: FractalVectorStore) -> None:
    [doc_id] = store.add_texts([TEXTS[2]], [{"source": "delete"}], ids=["delete-me"])
    assert [document.id for document in store.get_by_ids([doc_id])] == [doc_id]

    assert store.delete([doc_id]) is True
    assert store.get_by_ids([doc_id]) == []
    source = {"key": "source", "eq": "delete"}
    assert store.similarity_search(TEXTS[2], k=10, filter=source) == []
    assert store.delete([doc_id]) is True  # already gone: nothing to do
    with pytest.raises(ValueError):
        store.delete()


def test_from_texts(service: str) -> None:
    _create_collection(service, "langchain-from-texts")
    store = FractalVectorStore.from_texts(
        TEXTS,
        None,
        [{"n": position} for position in range(len(TEXTS))],
        url=service,
        api_key=KEY,
        collection="langchain-from-texts",
        granularity="coarse",
    )
    assert (store.collection, store.granularity) == ("langchain-from-texts", "coarse")
    document, score = store.similarity_search_with_score(TEXTS[4], k=1)[0]
    assert (document.page_content, document.metadata) == (TEXTS[4], {"n": 4})
    assert document.id  # the service's own id
    assert score == pytest.approx(1.0, abs=1e-3)
    store.close()
    with pytest.raises(TypeError, match="url"):
        FractalVectorStore.from_texts(TEXTS, None)


def test_embeddings(store: FractalVectorStore) -> None:
    embeddings = store.embeddings
    assert isinstance(embeddings, FractalEmbeddings)
    query = np.array(embeddings.embed_query(TEXTS[0]))
    assert query.shape == (DIM,)
    assert np.linalg.norm(query) == pytest.approx(1.0, abs=1e-5)

    # 12 texts, three requests of 4; the tokenizer lower-cases, so the upper-case ones repeat.
    texts = TEXTS + [text.upper() for text in TEXTS]
    vectors = np.array(embeddings.embed_documents(texts))
    assert vectors.shape == (len(texts), DIM)
    np.testing.assert_allclose(vectors[0], query, atol=1e-4)
    np.testing.assert_allclose(vectors[: len(TEXTS)], vectors[len(TEXTS) :], atol=1e-4)
    np.testing.assert_allclose(asyncio.run(embeddings.aembed_documents(texts)), vectors, atol=1e-4)
    np.testing.assert_allclose(asyncio.run(embeddings.aembed_query(TEXTS[0])), query, atol=1e-4)
    assert embeddings.embed_documents([]) == []

    prefix = FractalEmbeddings(store.url, api_key=KEY, dims=64)
    coarse = np.array(prefix.embed_query(TEXTS[0]))
    assert coarse.shape == (64,)
    np.testing.assert_allclose(coarse, query[:64] / np.linalg.norm(query[:64]), atol=1e-4)
    prefix.close()


@pytest.mark.parametrize("api_key", ["wrong-key-of-enough-characters", None])
def test_a_wrong_key_is_refused(service: str, api_key: str | None) -> None:
    with FractalVectorStore(service, api_key=api_key) as store:
        for call in (
            lambda: store.similarity_search(TEXTS[0]),
            lambda: store.add_texts([TEXTS[0]], ids=["never-stored"]),
            lambda: store.embeddings.embed_query(TEXTS[0]),
            lambda: asyncio.run(store.embeddings.aembed_query(TEXTS[0])),
        ):
            with pytest.raises(RequestRefused) as refused:
                call()
            assert refused.value.status_code == 401 and refused.value.message
    with FractalVectorStore(service, api_key=KEY) as store:
        assert store.get_by_ids(["never-stored"]) == []
