"""The Python client (:mod:`client`) against a real service on the tiny bundle, with an API key:
every operation in its synchronous and asynchronous forms, typed results, ingest of a generator
with concurrency and progress, and 429 answers the service really sends, retried until every
document is stored.

The service takes 4 texts a request and queues at most 4, so concurrent writes are shed with
429 and the client must honour ``Retry-After``. The tiny bundle's vectors are a bag of
characters: the texts here share no character, so a text's nearest document is its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from benchmarks.harness.metrics import metric, metric_samples
from client import AsyncFractalClient, FractalClient, RequestRefused, SearchResult
from tests.servers import start_server

KEY = "client-test-key-00000001"
MAX_TEXTS = 4
TEXTS = ["aaa bbb ccc", "xxx yyy zzz", "111 222 333", "mmm nnn ooo", "ppp qqq rrr", "ddd eee fff"]


@pytest.fixture(scope="module")
def service(tiny_bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("client")
    server = start_server(
        tiny_bundle_dir,
        directory / "index",
        directory / "service.log",
        api_keys=KEY,
        max_texts=str(MAX_TEXTS),
        queue_depth=str(MAX_TEXTS),
    )
    try:
        yield server.base_url
    finally:
        server.shut_down()


@pytest.fixture
def client(service: str) -> Iterator[FractalClient]:
    with FractalClient(service, api_key=KEY) as client:
        yield client


def test_embed_gives_each_prefix_of_each_text_in_order(client: FractalClient) -> None:
    dims = client.info()["resolutions"]["prefix_dims"]
    answer = client.embed(TEXTS, dims=dims)  # two requests of at most 4 texts
    assert answer.dims == dims and len(answer.vectors) == len(TEXTS)
    for dim in dims:
        vectors = np.array(answer.at(dim))
        assert vectors.shape == (len(TEXTS), dim)
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    alone = client.embed([TEXTS[5]], dims=dims[0]).at(dims[0])[0]
    assert np.allclose(alone, answer.at(dims[0])[5], atol=1e-5)
    assert client.embed([]).vectors == client.embed([]).at() == []


def test_documents_and_searches_are_typed(client: FractalClient) -> None:
    documents = [
        {"id": f"typed-{n}", "text": text, "metadata": {"n": n, "even": n % 2 == 0}}
        for n, text in enumerate(TEXTS)
    ]
    assert client.add_documents(documents) == [document["id"] for document in documents]
    result = client.search(TEXTS[3], k=3, granularity="coarse")
    assert isinstance(result, SearchResult)
    assert result.ids[0] == "typed-3" and result.hits[0].metadata == {"n": 3, "even": False}
    assert result.route.granularity == "coarse" and result.route.requested_granularity == "coarse"
    assert result.timings_ms.total >= result.timings_ms.search > 0
    c2f = client.search(TEXTS[2], k=2, granularity="fine", rerank="c2f")
    assert c2f.route.rerank == "c2f" and c2f.route.shortlist_k is not None
    batch = client.search_batch(TEXTS, k=1, filter={"key": "even", "eq": True}, batch_size=4)
    assert [result.ids for result in batch[::2]] == [["typed-0"], ["typed-2"], ["typed-4"]]
    assert all(result.hits[0].metadata["even"] for result in batch)
    assert client.get_document("typed-1").text == TEXTS[1]
    assert client.lookup(["typed-1", "typed-9", "x" * 300]) == {"typed-1"}
    assert client.delete_document("typed-1") is True
    with pytest.raises(RequestRefused) as missing:
        client.get_document("typed-1")
    assert (missing.value.status_code, missing.value.param) == (404, "id")


def test_collections_vectors_and_scoping(client: FractalClient, service: str) -> None:
    created = client.create_collection("client-news", index_kinds=["exact"])
    assert (created.name, created.index_kinds, created.documents) == ("client-news", ["exact"], 0)
    vectors = np.array(client.embed(TEXTS[:2]).at())
    imported = client.add_vectors(
        [{"id": f"v-{n}", "text": text, "vector": vectors[n]} for n, text in enumerate(TEXTS[:2])],
        collection="client-news",
    )
    assert imported == ["v-0", "v-1"]
    with FractalClient(service, api_key=KEY, collection="client-news") as news:
        assert news.search(TEXTS[1], k=1).ids == ["v-1"]
        assert news.lookup(["v-0", "typed-0"]) == {"v-0"}
    listed = {collection.name: collection for collection in client.collections()}
    assert listed["client-news"].documents == 2 and listed["default"].default
    with pytest.raises(RequestRefused) as exists:
        client.create_collection("client-news")
    assert exists.value.status_code == 409
    assert client.delete_collection("client-news") is True
    assert "client-news" not in {collection.name for collection in client.collections()}


def test_a_wrong_key_is_refused(service: str) -> None:
    with FractalClient(service, api_key="not-the-key-0000000000") as stranger:
        with pytest.raises(RequestRefused) as refused:
            stranger.search("anything")
    assert refused.value.status_code == 401


def test_ingest_of_a_generator_retries_the_429_the_service_sends(client: FractalClient) -> None:
    shed_before = metric(
        metric_samples(client.http), "fractal_requests_shed_total", reason="queue_full"
    )
    count = 400
    settled: list[int] = []
    documents = ({"id": f"flood-{n}", "text": f"flood text {n}"} for n in range(count))
    ids = client.add_documents(
        documents, batch_size=MAX_TEXTS, concurrency=16, progress=settled.append
    )
    assert ids == [f"flood-{n}" for n in range(count)]
    assert sum(settled) == count
    assert client.lookup(ids) == set(ids)
    shed = metric(metric_samples(client.http), "fractal_requests_shed_total", reason="queue_full")
    assert shed > shed_before, "the flood was never shed: the retry path went untested"


def test_the_asynchronous_client_runs_the_same_operations(service: str) -> None:
    async def scenario() -> tuple[list[str], list[SearchResult], list[list[float]], bool]:
        async with AsyncFractalClient(service, api_key=KEY, collection="client-async") as aio:
            await aio.create_collection("client-async")
            ids = await aio.add_documents(
                ({"id": f"a-{n}", "text": text} for n, text in enumerate(TEXTS)), concurrency=2
            )
            results = await asyncio.gather(*(aio.search(text, k=1) for text in TEXTS))
            vectors = (await aio.embed(TEXTS[:1], dims=64)).at(64)
            deleted = await aio.delete_collection("client-async")
        return ids, list(results), vectors, deleted

    ids, results, vectors, deleted = asyncio.run(scenario())
    assert ids == [f"a-{n}" for n in range(len(TEXTS))]
    assert [result.ids for result in results] == [[doc_id] for doc_id in ids]
    assert len(vectors[0]) == 64 and deleted
