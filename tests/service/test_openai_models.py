"""``GET /v1/models`` and ``GET /v1/models/{model}``: OpenAI's model objects for the served bundle,
the same names ``POST /v1/embeddings`` takes, behind the API keys like every other route."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from bundle import MANIFEST_FILE, load_bundle, write_manifest
from tests.service.helpers import make_settings, serve
from tests.tiny_bundle import NAME, build_tiny_bundle

CREATED = 1704067200
"""The tiny bundle's created_at, 2024-01-01T00:00:00+00:00, in Unix seconds."""
MODEL = {"id": NAME, "object": "model", "created": CREATED, "owned_by": "fractal"}


@pytest.fixture(scope="module")
def client(tiny_bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_settings(tiny_bundle_dir, tmp_path_factory.mktemp("models-index"))
    with serve(settings) as client:
        yield client


def _renamed_bundle(folder: Path, name: str, created_at: str) -> Path:
    """The tiny bundle in ``folder``, its manifest with another name and created_at."""
    manifest = build_tiny_bundle(folder)
    write_manifest(folder, replace(manifest, name=name, created_at=created_at))
    load_bundle(folder)
    return folder


def test_the_list_holds_the_served_model(client: TestClient) -> None:
    answer = client.get("/v1/models")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"object": "list", "data": [MODEL]}
    assert client.get("/info").json()["model"] == NAME


def test_retrieve_answers_the_listed_object(client: TestClient) -> None:
    answer = client.get(f"/v1/models/{NAME}")
    assert answer.status_code == 200, answer.text
    assert answer.json() == MODEL == client.get("/v1/models").json()["data"][0]


def test_every_listed_model_is_one_v1_embeddings_takes(client: TestClient) -> None:
    for model in client.get("/v1/models").json()["data"]:
        embedded = client.post("/v1/embeddings", json={"model": model["id"], "input": "hi"})
        assert embedded.status_code == 200, embedded.text
        assert embedded.json()["model"] == model["id"]


@pytest.mark.parametrize("model", ["text-embedding-3-small", "TINY", "tiny/extra", "a/b/c"])
def test_another_model_is_the_same_404_as_for_v1_embeddings(client: TestClient, model: str) -> None:
    retrieved = client.get(f"/v1/models/{model}")
    embedded = client.post("/v1/embeddings", json={"model": model, "input": "hi"})
    assert retrieved.status_code == embedded.status_code == 404, retrieved.text
    message = f"model {model!r} is not served; this service serves {NAME!r}"
    error = {"type": "model_not_found", "message": message, "param": "model"}
    assert retrieved.json() == embedded.json() == {"error": error}


def test_the_served_schema_names_the_model(client: TestClient) -> None:
    operation = client.get("/openapi.json").json()["paths"]["/v1/models/{model}"]["get"]
    (parameter,) = operation["parameters"]
    assert parameter["schema"]["enum"] == [NAME]


def test_other_methods_are_405_with_allow(client: TestClient) -> None:
    for path in ("/v1/models", f"/v1/models/{NAME}", "/v1/models/org/name"):
        answer = client.post(path)
        assert answer.status_code == 405, (path, answer.text)
        assert answer.headers["Allow"] == "GET", path


def test_a_name_with_a_slash_is_retrieved(tmp_path: Path) -> None:
    bundle = _renamed_bundle(tmp_path / "bundle", "acme/tiny-v2", "2025-06-30T12:00:00Z")
    with serve(make_settings(bundle, tmp_path / "index")) as client:
        expected = {"id": "acme/tiny-v2", "object": "model", "created": 1751284800}
        assert client.get("/v1/models").json()["data"] == [{**expected, "owned_by": "fractal"}]
        answer = client.get("/v1/models/acme/tiny-v2")
        assert answer.status_code == 200, answer.text
        assert answer.json()["id"] == "acme/tiny-v2"
        assert client.get("/v1/models/acme%2Ftiny-v2").json()["id"] == "acme/tiny-v2"


def test_created_falls_back_to_the_manifest_file_time(tmp_path: Path) -> None:
    bundle = _renamed_bundle(tmp_path / "bundle", NAME, "the first of January")
    os.utime(bundle / MANIFEST_FILE, (1_600_000_000, 1_600_000_000))
    with serve(make_settings(bundle, tmp_path / "index")) as client:
        assert client.get(f"/v1/models/{NAME}").json()["created"] == 1_600_000_000


def test_any_valid_key_lists_and_retrieves_and_none_is_401(
    tiny_bundle_dir: Path, tmp_path: Path
) -> None:
    full, read_only = "models-full-key-000000001", "models-read-key-000000001"
    key_file = tmp_path / "keys.txt"
    key_file.write_text(f"{read_only} read some-collection\n", encoding="utf-8")
    settings = make_settings(
        tiny_bundle_dir, tmp_path / "index", api_keys=full, api_keys_file=key_file
    )
    with serve(settings) as client:
        for path in ("/v1/models", f"/v1/models/{NAME}"):
            assert client.get(path).status_code == 401
            assert client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
            for key in (full, read_only):
                answer = client.get(path, headers={"Authorization": f"Bearer {key}"})
                assert answer.status_code == 200, (path, answer.text)
