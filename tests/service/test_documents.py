"""``/documents``: add (committed to the store of record before the answer), read, replace,
delete; on both index backends (the ``backend`` fixture)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from benchmarks.harness.metrics import metric_samples
from service.limits import MAX_LOOKUP_IDS
from service.settings import Settings
from tests.service.helpers import make_settings, serve, stored_texts


@pytest.fixture(scope="module")
def settings(tiny_bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory, backend) -> Settings:
    return make_settings(tiny_bundle_dir, tmp_path_factory.mktemp("documents-index"), **backend())


@pytest.fixture(scope="module")
def client(settings: Settings) -> Iterator[TestClient]:
    with serve(settings) as client:
        yield client


def _add(client: TestClient, documents: list[dict]) -> list[str]:
    response = client.post("/documents", json={"documents": documents})
    assert response.status_code == 200, response.text
    return response.json()["ids"]


def test_added_documents_are_committed_before_the_answer(
    client: TestClient, settings: Settings
) -> None:
    ids = _add(
        client,
        [
            {"id": "doc/1", "text": "reset my online banking password", "metadata": {"n": 1}},
            {"text": "what time does the pharmacy close", "metadata": {"tags": ["a", "b"]}},
            {"text": "play some jazz"},
        ],
    )
    assert ids[0] == "doc/1"
    assert len(set(ids)) == 3 and all(len(doc_id) == 32 for doc_id in ids[1:])
    stored = stored_texts(settings)
    assert stored["doc/1"] == "reset my online banking password"
    assert stored[ids[2]] == "play some jazz"
    got = client.get(f"/documents/{ids[1]}").json()
    assert got == {
        "id": ids[1],
        "text": "what time does the pharmacy close",
        "metadata": {"tags": ["a", "b"]},
    }
    assert client.get("/documents/doc/1").json()["metadata"] == {"n": 1}


def test_same_id_replaces_the_document(client: TestClient) -> None:
    _add(client, [{"id": "replace-me", "text": "book a flight to rome"}])
    _add(client, [{"id": "replace-me", "text": "order a large pizza", "metadata": {"v": 2}}])
    assert client.get("/documents/replace-me").json()["text"] == "order a large pizza"
    hits = client.get("/search", params={"q": "order a large pizza", "k": 50}).json()["hits"]
    assert [hit["id"] for hit in hits].count("replace-me") == 1
    assert hits[0]["id"] == "replace-me" and hits[0]["metadata"] == {"v": 2}


def test_delete_removes_from_store_and_indexes(client: TestClient, settings: Settings) -> None:
    (doc_id,) = _add(client, [{"text": "how many vacation days do i have left"}])
    response = client.delete(f"/documents/{doc_id}")
    assert response.status_code == 200
    assert response.json() == {"id": doc_id, "deleted": True}
    assert doc_id not in stored_texts(settings)
    missing = client.get(f"/documents/{doc_id}")
    assert missing.status_code == 404
    assert missing.json()["error"] == {
        "type": "not_found",
        "message": f"no document with id {doc_id!r}",
        "param": "id",
    }
    assert client.delete(f"/documents/{doc_id}").status_code == 404
    for granularity in ("coarse", "fine"):
        hits = client.get(
            "/search",
            params={"q": "how many vacation days do i have left", "granularity": granularity},
        ).json()["hits"]
        assert doc_id not in [hit["id"] for hit in hits]


@pytest.mark.parametrize(
    ("documents", "needle"),
    [
        ([{"id": "x", "text": "a"}, {"id": "x", "text": "b"}], "documents.1.id 'x' repeats"),
        ([{"id": "", "text": "a"}], "documents.0.id is empty"),
        ([{"id": "i" * 257, "text": "a"}], "the limit is 256"),
        ([{"id": "..", "text": "a"}], "documents.0.id has '.' or '..' as a path segment"),
        ([{"id": "a/./b", "text": "a"}], "documents.0.id has '.' or '..' as a path segment"),
        ([{"text": "ok"}, {"text": " "}], "documents.1.text is empty"),
        ([{"text": "t" * 8193}], "documents.0.text has 8193 characters; the limit is 8192"),
        ([{"text": "a"}] * 129, "documents has 129 items; the limit is 128"),
        ([{"text": "a", "metadata": [1]}], "documents.0.metadata"),
        ([{"text": "a", "vector": [1.0]}], "documents.0.vector: Extra inputs are not permitted"),
        ([], "documents: List should have at least 1 item"),
    ],
)
def test_bad_documents_are_refused_and_nothing_is_stored(
    client: TestClient, settings: Settings, documents: list, needle: str
) -> None:
    before = stored_texts(settings)
    response = client.post("/documents", json={"documents": documents})
    assert response.status_code == 422
    assert needle in response.json()["error"]["message"]
    assert stored_texts(settings) == before


def test_non_finite_metadata_is_refused(client: TestClient) -> None:
    # Python's JSON parser accepts NaN; a stored NaN could never be returned as JSON.
    response = client.post(
        "/documents",
        content=b'{"documents": [{"text": "a", "metadata": {"x": NaN}}]}',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 422
    assert "metadata must be plain JSON" in response.json()["error"]["message"]


def test_lookup_says_which_ids_are_stored_in_one_request(client: TestClient) -> None:
    _add(client, [{"id": "look/1", "text": "one"}, {"id": "look/2", "text": "two"}])
    asked = ["look/2", "look/missing", "look/1", "look/2"]
    response = client.post("/documents/lookup", json={"ids": asked})
    assert response.status_code == 200, response.text
    assert response.json() == {"found": ["look/2", "look/1"]}
    client.delete("/documents/look/1")
    assert client.post("/documents/lookup", json={"ids": asked}).json() == {"found": ["look/2"]}


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"ids": []}, "ids: List should have at least 1 item"),
        ({"ids": ["a"] * (MAX_LOOKUP_IDS + 1)}, f"ids: List should have at most {MAX_LOOKUP_IDS}"),
        ({"ids": ["a", " "]}, "ids.1 is empty or only whitespace"),
        ({"ids": ["x" * 257]}, "ids.0 has 257 characters; the limit is 256"),
        ({"ids": [1]}, "ids.0: Input should be a valid string"),
        ({"ids": "a"}, "ids: Input should be a valid list"),
        ({"ids": ["a"], "k": 1}, "k: Extra inputs are not permitted"),
        ({}, "ids: Field required"),
    ],
)
def test_bad_lookups_are_refused(client: TestClient, body: dict, needle: str) -> None:
    response = client.post("/documents/lookup", json=body)
    assert response.status_code == 422
    assert needle in response.json()["error"]["message"]


def test_writes_are_snapshotted_periodically(tiny_bundle_dir: Path, settings_for) -> None:
    settings = settings_for(tiny_bundle_dir, snapshot_interval_s=0.005)
    manifest = settings.index_dir / "snapshot" / "manifest.json"
    with serve(settings) as client:
        assert not manifest.exists()  # nothing written, nothing to snapshot
        _add(client, [{"text": "cancel my gym membership"}, {"text": "how tall is everest"}])
        for _ in range(4000):  # a bound on polls, not a deadline
            if manifest.exists():
                break
            time.sleep(0.005)
        assert json.loads(manifest.read_text())["counter"] == 2
        for _ in range(4000):  # the duration is observed once the snapshot thread returns
            snapshots = metric_samples(client).get(
                ("fractal_snapshot_duration_seconds_count", frozenset())
            )
            if snapshots:
                break
            time.sleep(0.005)
        assert snapshots == 1  # written once: nothing changed since
