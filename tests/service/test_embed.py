"""``POST /embed`` and ``POST /v1/embeddings`` through the app, against the bundle's own ONNX
graph run directly."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from fastapi.testclient import TestClient
from tokenizers import Tokenizer

from tests.service.helpers import make_settings, serve

TEXTS = ["transfer 200 dollars to my checking account", "wake me up at 6", "tell me a joke"]


@pytest.fixture(scope="module")
def client(v5_bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_settings(v5_bundle_dir, tmp_path_factory.mktemp("embed-index"))
    with serve(settings) as client:
        yield client


@pytest.fixture(scope="module")
def reference(v5_bundle_dir: Path) -> tuple[np.ndarray, list[int]]:
    """The full embeddings and token counts of TEXTS from tokenizer.json + encoder.onnx."""
    tokenizer = Tokenizer.from_file(str(v5_bundle_dir / "tokenizer.json"))
    encodings = tokenizer.encode_batch(TEXTS)
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    session = ort.InferenceSession(str(v5_bundle_dir / "encoder.onnx"))
    (vectors,) = session.run(["embedding"], {"input_ids": ids, "attention_mask": mask})
    return vectors, [int(row.sum()) for row in mask]


def _vectors(body: dict, dim: int) -> np.ndarray:
    return np.array(
        [
            next(e["vector"] for e in item["embeddings"] if e["dim"] == dim)
            for item in sorted(body["data"], key=lambda item: item["index"])
        ]
    )


def test_several_resolutions_each_renormalised(
    client: TestClient, reference: tuple[np.ndarray, list[int]]
) -> None:
    full, tokens = reference
    response = client.post("/embed", json={"texts": TEXTS, "dims": [64, 128, 256]})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == "clinc150-v5-small"
    assert body["dims"] == [64, 128, 256] and body["normalized"] is True
    assert body["usage"] == {"prompt_tokens": sum(tokens), "total_tokens": sum(tokens)}
    for dim in (64, 128, 256):
        vectors = _vectors(body, dim)
        assert vectors.shape == (len(TEXTS), dim)
        expected = full[:, :dim] / np.linalg.norm(full[:, :dim], axis=1, keepdims=True)
        np.testing.assert_allclose(vectors, expected, atol=1e-5)


def test_raw_prefix_slices_without_normalisation(
    client: TestClient, reference: tuple[np.ndarray, list[int]]
) -> None:
    full, _ = reference
    body = client.post("/embed", json={"texts": TEXTS, "dims": 192, "normalize": False}).json()
    assert body["normalized"] is False
    np.testing.assert_allclose(_vectors(body, 192), full[:, :192], atol=1e-5)


def test_granularity_picks_the_manifest_dimension_and_default_is_full(client: TestClient) -> None:
    coarse = client.post("/embed", json={"texts": TEXTS[:1], "granularity": "coarse"}).json()
    assert coarse["dims"] == [64]
    default = client.post("/embed", json={"texts": TEXTS[:1]}).json()
    assert default["dims"] == [256]


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"texts": TEXTS, "dims": [64, 100]}, 422, "allowed: 64, 128, 192, 256"),
        ({"texts": TEXTS, "dims": [64, 64]}, 422, "repeat"),
        ({"texts": TEXTS, "dims": []}, 422, "at least one"),
        ({"texts": TEXTS, "dims": 64, "granularity": "fine"}, 422, "not both"),
        ({"texts": TEXTS, "granularity": "medium"}, 422, "'coarse' or 'fine'"),
        ({"texts": []}, 422, "at least 1 item"),
        ({"texts": ["ok", "   \n"]}, 422, "texts.1 is empty"),
        ({"texts": ["x" * 8193]}, 422, "limit is 8192"),
        ({"texts": ["a"] * 129}, 422, "limit is 128"),
        ({"texts": ["ok"], "dim": 64}, 422, "dim"),
    ],
)
def test_bad_embed_requests_name_the_limit(
    client: TestClient, body: dict, status: int, needle: str
) -> None:
    response = client.post("/embed", json=body)
    assert response.status_code == status
    assert needle in response.json()["error"]["message"]
    assert response.json()["error"]["type"] == "invalid_request"


def test_lone_surrogate_is_refused(client: TestClient) -> None:
    # JSON allows the escape; the text cannot be tokenised or stored.
    response = client.post(
        "/embed",
        content=b'{"texts": ["ok", "\\ud800 lone surrogate"]}',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 422
    assert response.json()["error"] == {
        "type": "invalid_request",
        "message": "texts.1 is not valid Unicode (it holds a lone surrogate)",
        "param": "texts.1",
    }


def test_openai_float_and_base64_agree_with_embed(client: TestClient) -> None:
    request = {"model": "clinc150-v5-small", "input": TEXTS, "dimensions": 64, "user": "u1"}
    floats = client.post("/v1/embeddings", json=request)
    assert floats.status_code == 200, floats.text
    body = floats.json()
    assert body["object"] == "list" and body["model"] == "clinc150-v5-small"
    assert [item["index"] for item in body["data"]] == [0, 1, 2]
    assert all(item["object"] == "embedding" for item in body["data"])
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 0
    as_floats = np.array([item["embedding"] for item in body["data"]])
    encoded = client.post("/v1/embeddings", json={**request, "encoding_format": "base64"}).json()
    as_base64 = np.array(
        [np.frombuffer(base64.b64decode(i["embedding"]), dtype="<f4") for i in encoded["data"]]
    )
    np.testing.assert_allclose(as_base64, as_floats, atol=1e-6)
    via_embed = _vectors(client.post("/embed", json={"texts": TEXTS, "dims": 64}).json(), 64)
    np.testing.assert_allclose(as_floats, via_embed, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(as_floats, axis=1), 1.0, atol=1e-5)


def test_openai_single_string_and_default_dimension(client: TestClient) -> None:
    body = client.post(
        "/v1/embeddings", json={"model": "clinc150-v5-small", "input": "hello there"}
    ).json()
    assert len(body["data"]) == 1 and len(body["data"][0]["embedding"]) == 256


def test_openai_token_arrays_embed_as_their_texts(v5_bundle_dir: Path, client: TestClient) -> None:
    tokenizer = Tokenizer.from_file(str(v5_bundle_dir / "tokenizer.json"))
    token_ids = [tokenizer.encode(text).ids for text in TEXTS]
    assert token_ids[0][0] == 101 and token_ids[0][-1] == 102  # [CLS] … [SEP], as given
    request = {"model": "clinc150-v5-small", "dimensions": 64, "encoding_format": "float"}
    as_texts = client.post("/v1/embeddings", json={**request, "input": TEXTS}).json()
    batch = client.post("/v1/embeddings", json={**request, "input": token_ids})
    assert batch.status_code == 200, batch.text
    single = client.post("/v1/embeddings", json={**request, "input": token_ids[1]}).json()
    vectors = np.array([item["embedding"] for item in as_texts["data"]])
    from_ids = [item["embedding"] for item in batch.json()["data"]]
    np.testing.assert_allclose(from_ids, vectors, atol=1e-5)
    np.testing.assert_allclose(single["data"][0]["embedding"], vectors[1], atol=1e-5)
    tokens = sum(len(ids) for ids in token_ids)
    assert batch.json()["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
    assert as_texts["usage"] == batch.json()["usage"]


@pytest.mark.parametrize(
    ("body", "status", "kind", "needle"),
    [
        ({"model": "gpt", "input": "x"}, 404, "model_not_found", "clinc150-v5-small"),
        (
            {"model": "clinc150-v5-small", "input": "x", "dimensions": 100},
            422,
            "invalid_request",
            "allowed: 64, 128, 192, 256",
        ),
        ({"model": "clinc150-v5-small", "input": ""}, 422, "invalid_request", "input is empty"),
        ({"model": "clinc150-v5-small", "input": []}, 422, "invalid_request", "input is empty"),
        (
            {"model": "clinc150-v5-small", "input": [[101, 2054, 30522]]},
            422,
            "invalid_request",
            "input.0 holds token id 30522, outside this model's vocabulary (0 to 30521)",
        ),
        (
            {"model": "clinc150-v5-small", "input": [101] * 257},
            422,
            "invalid_request",
            "input has 257 token ids; the limit is 256 (the model's max tokens)",
        ),
        (
            {"model": "clinc150-v5-small", "input": [[101, 102], []]},
            422,
            "invalid_request",
            "input.1 is empty: give at least one token id",
        ),
        (
            {"model": "clinc150-v5-small", "input": [[101, "a"]]},
            422,
            "invalid_request",
            "input.0 must hold only integer token ids",
        ),
        (
            {"model": "clinc150-v5-small", "input": ["a", 101]},
            422,
            "invalid_request",
            "input must be a string, a list of strings, a list of token ids or a list of lists",
        ),
        (
            {"model": "clinc150-v5-small", "input": ["ok", " "]},
            422,
            "invalid_request",
            "input.1 is empty or only whitespace",
        ),
        (
            {"model": "clinc150-v5-small", "input": "x", "encoding_format": "hex"},
            422,
            "invalid_request",
            "encoding_format",
        ),
    ],
)
def test_bad_openai_requests(
    client: TestClient, body: dict, status: int, kind: str, needle: str
) -> None:
    response = client.post("/v1/embeddings", json=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["type"] == kind and needle in error["message"]
