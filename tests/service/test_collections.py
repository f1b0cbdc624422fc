"""Named collections through HTTP on the tiny torch-free bundle: created, listed, kept apart,
searched, reopened after a restart, deleted only with their name repeated; the default
collection keeps the routes without a collection."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.errors import NotFound
from service.settings import Settings
from service.startup import load_runtime
from tests.service.helpers import collection_data_exists, make_settings, serve
from tests.tiny_bundle import build_tiny_bundle

NEWS = ["stocks rallied on strong earnings", "the central bank held rates", "a new phone launch"]
INTENTS = ["what is my balance", "book a flight to paris", "set an alarm for six"]


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tiny-collections")
    build_tiny_bundle(directory)
    return directory


@pytest.fixture
def settings(bundle_dir: Path, tmp_path: Path, backend) -> Settings:
    return make_settings(bundle_dir, tmp_path / "index", index_kinds="exact,hnsw", **backend())


def _add(client: TestClient, path: str, texts: list[str], **metadata: str) -> list[str]:
    documents = [{"id": f"{i}", "text": text, "metadata": metadata} for i, text in enumerate(texts)]
    response = client.post(path, json={"documents": documents})
    assert response.status_code == 200, response.text
    return response.json()["ids"]


def _search_ids(client: TestClient, **params: str) -> set[str]:
    response = client.get("/search", params={"q": "money and markets", "k": 10, **params})
    assert response.status_code == 200, response.text
    return {hit["text"] for hit in response.json()["hits"]}


def test_collections_keep_their_documents_apart(settings: Settings) -> None:
    with serve(settings) as client:
        created = client.post("/collections", json={"name": "news"})
        assert created.status_code == 201, created.text
        assert created.json() == {
            "name": "news", "default": False, "index_kinds": ["exact", "hnsw"], "documents": 0
        }  # fmt: skip
        _add(client, "/collections/news/documents", NEWS, source="news")
        _add(client, "/documents", INTENTS, source="clinc")
        # The same ids in two collections are two documents.
        assert client.get("/collections/news/documents/0").json()["text"] == NEWS[0]
        assert client.get("/documents/0").json()["text"] == INTENTS[0]
        assert _search_ids(client, collection="news") == set(NEWS)
        assert _search_ids(client) == set(INTENTS)
        assert _search_ids(client, collection="default") == set(INTENTS)
        batch = client.post("/search", json={"queries": ["rates"], "collection": "news", "k": 3})
        assert {hit["text"] for hit in batch.json()["results"][0]["hits"]} == set(NEWS)
        listed = client.get("/collections").json()["collections"]
        assert [(c["name"], c["default"], c["documents"]) for c in listed] == [
            ("default", True, 3), ("news", False, 3)
        ]  # fmt: skip
        deleted = client.delete("/collections/news/documents/2")
        assert deleted.status_code == 200 and client.get("/documents/2").status_code == 200
        metrics = client.get("/metrics").text
        assert 'fractal_documents{collection="news"} 2.0' in metrics
        assert 'fractal_documents{collection="default"} 3.0' in metrics


def test_named_collections_come_back_after_a_restart(settings: Settings) -> None:
    with serve(settings) as client:
        assert client.post(
            "/collections", json={"name": "exact-only", "index_kinds": ["exact"]}
        ).status_code == 201  # fmt: skip
        _add(client, "/collections/exact-only/documents", NEWS)
    with serve(settings) as client:
        assert _search_ids(client, collection="exact-only") == set(NEWS)
        # Its own index kinds: no HNSW was built there, though the default collection has one.
        refused = client.get(
            "/search", params={"q": "rates", "collection": "exact-only", "index": "hnsw"}
        )
        assert refused.status_code == 422, refused.text
        assert client.get("/search", params={"q": "rates", "index": "hnsw"}).status_code == 200


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"name": "default"}, 409, "name"),
        ({"name": "Bad Name"}, 422, "name"),
        ({"name": ""}, 422, "name"),
        ({"name": "x" * 64}, 422, "name"),
        ({"name": "ok", "index_kinds": ["exact", "exact"]}, 422, "index_kinds"),
        ({"name": "ok", "index_kinds": ["ivf"]}, 422, None),
        ({"name": "ok", "extra": 1}, 422, None),
    ],
)
def test_bad_collection_requests(
    settings: Settings, body: dict, status: int, param: str | None
) -> None:
    with serve(settings) as client:
        response = client.post("/collections", json=body)
        assert response.status_code == status, response.text
        if param is not None:
            assert response.json()["error"]["param"].startswith(param)
        assert [c["name"] for c in client.get("/collections").json()["collections"]] == ["default"]


def test_a_taken_name_is_a_conflict(settings: Settings) -> None:
    with serve(settings) as client:
        assert client.post("/collections", json={"name": "news"}).status_code == 201
        again = client.post("/collections", json={"name": "news"})
        assert again.status_code == 409 and again.json()["error"]["type"] == "conflict"


def test_a_missing_collection_is_a_404_everywhere(settings: Settings) -> None:
    with serve(settings) as client:
        answers = [
            client.get("/search", params={"q": "rates", "collection": "nope"}),
            client.post("/search", json={"queries": ["rates"], "collection": "nope"}),
            client.post("/collections/nope/documents", json={"documents": [{"text": "a"}]}),
            client.get("/collections/nope/documents/1"),
            client.delete("/collections/nope/documents/1"),
            client.request("DELETE", "/collections/nope", json={"name": "nope"}),
        ]
        for response in answers:
            assert response.status_code == 404, (response.request.url, response.text)
            assert "nope" in response.json()["error"]["message"]


def test_delete_needs_the_name_repeated_and_removes_everything(settings: Settings) -> None:
    with serve(settings) as client:
        client.post("/collections", json={"name": "news"})
        _add(client, "/collections/news/documents", NEWS)
        mismatch = client.request("DELETE", "/collections/news", json={"name": "new"})
        assert mismatch.status_code == 422 and mismatch.json()["error"]["param"] == "name"
        missing_body = client.request("DELETE", "/collections/news")
        assert missing_body.status_code == 422
        assert client.get("/collections/news/documents/0").status_code == 200
        assert collection_data_exists(settings, "news")
        deleted = client.request("DELETE", "/collections/news", json={"name": "news"})
        assert deleted.status_code == 200 and deleted.json() == {"name": "news", "deleted": True}
        assert client.get("/collections/news/documents/0").status_code == 404
        assert not collection_data_exists(settings, "news")
        assert 'collection="news"' not in client.get("/metrics").text
        refused = client.request("DELETE", "/collections/default", json={"name": "default"})
        assert refused.status_code == 404
        assert "default collection cannot be deleted" in refused.json()["error"]["message"]
        # The name is free again, and the new collection starts empty.
        assert client.post("/collections", json={"name": "news"}).json()["documents"] == 0
    with serve(settings) as client:
        names = [c["name"] for c in client.get("/collections").json()["collections"]]
        assert names == ["default", "news"]


def test_deletion_waits_for_the_requests_using_the_collection(settings: Settings) -> None:
    """A request that holds a collection keeps it open; a deletion refuses new requests at
    once and closes the store only when the holder is done."""
    runtime = load_runtime(settings)
    try:
        hosted = runtime.collections.create("busy", None)
        holding, release = threading.Event(), threading.Event()

        def hold() -> None:
            with hosted.use():
                holding.set()
                release.wait(5)
                hosted.collection.stats()  # still open: the deletion is waiting

        holder = threading.Thread(target=hold)
        holder.start()
        holding.wait(5)
        deleter = threading.Thread(target=runtime.collections.delete, args=("busy",))
        deleter.start()
        deleter.join(0.3)
        assert deleter.is_alive()  # waiting for the holder
        with pytest.raises(NotFound):
            runtime.collections.get("busy")
        release.set()
        holder.join(5)
        deleter.join(5)
        assert not deleter.is_alive()
        assert not collection_data_exists(settings, "busy")
    finally:
        runtime.collections.close()
