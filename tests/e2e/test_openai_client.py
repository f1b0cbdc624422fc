"""The official ``openai`` client against a real server: floats, its default base64, dimensions,
token arrays and errors; the model list and a model, with an API key."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import numpy as np
import openai
import pytest
from tokenizers import Tokenizer

from benchmarks.harness.processes import ServiceProcess
from bundle import load_bundle
from tests.servers import GRACEFUL_EXITS

MODEL = "clinc150-v5-small"
KEY = "openai-client-test-key-0001"
TEXTS = ["i need to transfer money to my sister", "what's on my calendar today", "hi there"]


def test_openai_client_embeddings(
    v5_bundle_dir: Path, tmp_path: Path, launch: Callable[..., ServiceProcess]
) -> None:
    server = launch(v5_bundle_dir, tmp_path / "index")
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0)

    default = client.embeddings.create(model=MODEL, input=TEXTS, dimensions=64)  # base64
    as_floats = client.embeddings.create(
        model=MODEL, input=TEXTS, dimensions=64, encoding_format="float"
    )
    assert default.model == MODEL and default.object == "list"
    assert [item.index for item in default.data] == [0, 1, 2]
    vectors = np.array([item.embedding for item in default.data])
    assert vectors.shape == (3, 64)
    np.testing.assert_allclose(vectors, [item.embedding for item in as_floats.data], atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert default.usage.prompt_tokens == default.usage.total_tokens > len(TEXTS)

    with server.client() as http:
        body = http.post("/embed", json={"texts": TEXTS, "dims": 64}).json()
    np.testing.assert_allclose(
        vectors, [item["embeddings"][0]["vector"] for item in body["data"]], atol=1e-5
    )

    full = client.embeddings.create(model=MODEL, input="a single string")
    assert len(full.data) == 1 and len(full.data[0].embedding) == 256

    # Token arrays, as the OpenAI API takes them: the bundle tokenizer's ids of the texts.
    tokenizer = Tokenizer.from_file(str(v5_bundle_dir / "tokenizer.json"))
    token_ids = [tokenizer.encode(text).ids for text in TEXTS]
    from_ids = client.embeddings.create(model=MODEL, input=token_ids, dimensions=64)
    np.testing.assert_allclose([item.embedding for item in from_ids.data], vectors, atol=1e-5)
    one = client.embeddings.create(model=MODEL, input=[101, 2054, 102], dimensions=64)
    assert len(one.data) == 1 and one.usage.prompt_tokens == 3

    with pytest.raises(openai.NotFoundError) as missing:
        client.embeddings.create(model="text-embedding-3-small", input=TEXTS)
    assert MODEL in str(missing.value)
    with pytest.raises(openai.UnprocessableEntityError) as bad_dims:
        client.embeddings.create(model=MODEL, input=TEXTS, dimensions=100)
    assert "allowed: 64, 128, 192, 256" in str(bad_dims.value)
    assert server.stop() in GRACEFUL_EXITS


def test_openai_client_models(
    v5_bundle_dir: Path, tmp_path: Path, launch: Callable[..., ServiceProcess]
) -> None:
    server = launch(v5_bundle_dir, tmp_path / "index", api_keys=KEY)
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=KEY, max_retries=0)
    created = datetime.fromisoformat(load_bundle(v5_bundle_dir).created_at).timestamp()

    models = client.models.list()
    assert [(m.id, m.object, m.created, m.owned_by) for m in models] == [
        (MODEL, "model", int(created), "fractal")
    ]
    for listed in models:
        assert client.models.retrieve(listed.id) == listed
        embedded = client.embeddings.create(model=listed.id, input="hi there", dimensions=64)
        assert embedded.model == listed.id and len(embedded.data[0].embedding) == 64

    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("text-embedding-3-small")
    assert missing.value.type == "model_not_found" and MODEL in str(missing.value)
    stranger = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stranger.models.list()
    assert server.stop() in GRACEFUL_EXITS
