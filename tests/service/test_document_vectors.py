"""``POST /documents/vectors``: documents with precomputed vectors of the served bundle, stored
without encoding; bad vectors get the one-shape 422 and nothing of the request is stored."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from bundle import Manifest, load_bundle
from encoding.encoder import OnnxEncoder
from service.settings import Settings
from tests.service.helpers import make_settings, serve

TEXTS = ["reset my online banking password", "play some jazz", "book a table for two"]


@pytest.fixture(scope="module")
def manifest(tiny_bundle_dir: Path) -> Manifest:
    return load_bundle(tiny_bundle_dir)


@pytest.fixture(scope="module")
def vectors(tiny_bundle_dir: Path, manifest: Manifest) -> np.ndarray:
    return OnnxEncoder(tiny_bundle_dir, manifest, threads=1).encode(TEXTS).vectors


@pytest.fixture(scope="module")
def settings(tiny_bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory, backend) -> Settings:
    return make_settings(
        tiny_bundle_dir, tmp_path_factory.mktemp("vectors-index"), max_texts=4, **backend()
    )


@pytest.fixture(scope="module")
def client(settings: Settings) -> Iterator[TestClient]:
    with serve(settings) as client:
        yield client


def _body(manifest: Manifest, vectors: np.ndarray, prefix: str) -> dict:
    documents = [
        {"id": f"{prefix}-{i}", "text": text, "metadata": {"i": i}, "vector": vector.tolist()}
        for i, (text, vector) in enumerate(zip(TEXTS, vectors, strict=True))
    ]
    return {"bundle_hash": manifest.content_hash, "documents": documents}


def test_stored_documents_are_found_by_search(
    client: TestClient, manifest: Manifest, vectors: np.ndarray
) -> None:
    response = client.post("/documents/vectors", json=_body(manifest, vectors, "v"))
    assert response.status_code == 200, response.text
    assert response.json() == {"ids": ["v-0", "v-1", "v-2"]}
    assert client.get("/documents/v-1").json() == {
        "id": "v-1",
        "text": TEXTS[1],
        "metadata": {"i": 1},
    }
    response = client.post("/search", json={"queries": TEXTS, "k": 1, "granularity": "fine"})
    hits = [result["hits"][0] for result in response.json()["results"]]
    assert [hit["id"] for hit in hits] == ["v-0", "v-1", "v-2"]
    assert [hit["score"] for hit in hits] == pytest.approx([1.0] * 3, abs=1e-5)


def _nan(body: dict) -> None:
    body["documents"][2]["vector"][7] = float("nan")


def _inf(body: dict) -> None:
    body["documents"][1]["vector"][0] = float("inf")


def _short(body: dict) -> None:
    body["documents"][1]["vector"] = body["documents"][1]["vector"][:64]


def _other_bundle(body: dict) -> None:
    body["bundle_hash"] = "0" * 64


def _repeated_id(body: dict) -> None:
    body["documents"][2]["id"] = body["documents"][0]["id"]


def _too_many(body: dict) -> None:
    body["documents"] += body["documents"][:2]


def _blank_text(body: dict) -> None:
    body["documents"][0]["text"] = " "


BAD_BODIES: list[tuple[Callable[[dict], None], str, str]] = [
    (_nan, "documents.2.vector", "holds NaN or infinity"),
    (_inf, "documents.1.vector", "holds NaN or infinity"),
    (_short, "documents.1.vector", "has 64 values; the served bundle's vectors have 384"),
    (_other_bundle, "bundle_hash", "is not the served bundle's"),
    (_repeated_id, "documents.2.id", "repeats an earlier id of this request"),
    (_too_many, "documents", "has 5 items; the limit is 4 per request"),
    (_blank_text, "documents.0.text", "is empty or only whitespace"),
]


@pytest.mark.parametrize(
    ("spoil", "param", "message"), BAD_BODIES, ids=lambda v: getattr(v, "__name__", str(v))
)
def test_bad_vectors_get_one_422_and_nothing_is_stored(
    client: TestClient,
    manifest: Manifest,
    vectors: np.ndarray,
    spoil: Callable[[dict], None],
    param: str,
    message: str,
) -> None:
    body = _body(manifest, vectors, f"bad-{spoil.__name__}")
    spoil(body)
    # NaN and inf are not JSON; Python's encoder writes them as literals, which the service reads.
    response = client.post(
        "/documents/vectors", content=json.dumps(body), headers={"content-type": "application/json"}
    )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request" and error["param"] == param
    assert message in error["message"]
    for document in body["documents"]:
        assert client.get(f"/documents/{document['id']}").status_code == 404
