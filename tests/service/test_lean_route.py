"""The lean route answers every request as FastAPI's own handler does.

Two apps serve the same bundle from two index folders, one on the lean path and one with
FastAPI's handler on every route (``FRACTAL_LEAN_ROUTES=false``), and get the same requests in
the same order: the malformed corpus of the error test and well-formed requests of every lean
route. Each answer must be the same: status, content type and body (timings and generated
document ids aside), so that the error shapes and messages, and what a good request returns,
are unchanged. The lean path must also have answered the well-formed requests itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service import lean_route
from tests.service.helpers import make_settings, serve
from tests.service.request_corpus import MODEL, malformed_requests

DOCUMENTS = [
    {"id": f"doc-{i}", "text": text, "metadata": {"n": i, "kind": "even" if i % 2 else "odd"}}
    for i, text in enumerate(
        [
            "what is my checking account balance",
            "book a flight to paris next week",
            "how do i reset my password",
            "play some jazz music",
            "what's the weather tomorrow",
            "transfer money to my savings",
        ]
    )
]
FILTER = json.dumps({"key": "kind", "eq": "even"})


def _well_formed() -> Iterator[tuple[str, str, dict]]:
    for granularity in ("coarse", "fine", "auto"):
        for index in ("exact", "hnsw"):
            params = {"q": "my balance", "k": "3", "granularity": granularity, "index": index}
            yield "GET", "/search", {"params": params}
            yield "GET", "/search", {"params": {**params, "filter": FILTER}}
            yield "POST", "/search", {"json": {"queries": ["flight", "jazz"], "index": index}}
    yield "GET", "/search", {"params": {"q": "balance", "rerank": "c2f"}}
    yield "POST", "/embed", {"json": {"texts": ["a", "b"], "dims": [64, 256]}}
    yield "POST", "/embed", {"json": {"texts": ["a"], "normalize": False}}
    for encoding in ("float", "base64"):
        body = {"model": MODEL, "input": "hello", "encoding_format": encoding}
        yield "POST", "/v1/embeddings", {"json": body}
    yield "GET", "/v1/models", {}
    yield "GET", "/info", {}
    yield "GET", "/collections", {}


TIMINGS = ("timings_ms", "resolve_ms")
GENERATED_ID = re.compile("[0-9a-f]{32}")


def _scrubbed(value: Any) -> Any:
    """``value`` without its timings, and with generated ids (the hex of a random UUID) as
    one placeholder."""
    if isinstance(value, list):
        return [_scrubbed(item) for item in value]
    if isinstance(value, str) and GENERATED_ID.fullmatch(value):
        return "generated"
    if not isinstance(value, dict):
        return value
    kept = {key: _scrubbed(item) for key, item in value.items() if key not in TIMINGS}
    return kept


def _comparable(response: Any) -> tuple[int, str | None, Any]:
    """What must match: the status, the content type and the body (:func:`_scrubbed`; not
    the metrics' text)."""
    body: Any = response.content
    if response.request.url.path == "/metrics":
        body = None  # this process's own counters and timings
    elif response.headers.get("content-type") == "application/json":
        body = _scrubbed(response.json())
    return response.status_code, response.headers.get("content-type"), body


REQUESTS = [*_well_formed(), *malformed_requests()]


def _answers(client: TestClient) -> list[tuple[int, str | None, Any]]:
    client.post("/documents", json={"documents": DOCUMENTS})
    return [
        _comparable(client.request(method, path, **options)) for method, path, options in REQUESTS
    ]


@pytest.fixture(scope="module")
def answers(
    v5_bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[list, list, list[bool]]:
    """Every answer of the lean app, of the app with FastAPI's handlers
    (``lean_routes=False``), and whether the lean app built each well-formed request's
    arguments itself."""
    lean_built: list[bool] = []
    took_lean: list[bool] = []
    build = lean_route.ArgumentPlan.build

    async def counted(plan: lean_route.ArgumentPlan, request: Any) -> dict[str, Any]:
        arguments = await build(plan, request)
        lean_built.append(True)
        return arguments

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lean_route.ArgumentPlan, "build", counted)
        settings = make_settings(v5_bundle_dir, tmp_path_factory.mktemp("lean"))
        with serve(settings, raise_server_exceptions=False) as client:
            client.post("/documents", json={"documents": DOCUMENTS})
            for method, path, options in _well_formed():
                before = len(lean_built)
                client.request(method, path, **options)
                took_lean.append(len(lean_built) > before)
            lean = _answers(client)
    settings = make_settings(v5_bundle_dir, tmp_path_factory.mktemp("plain"), lean_routes=False)
    with serve(settings, raise_server_exceptions=False) as client:
        client.post("/documents", json={"documents": DOCUMENTS})
        for method, path, options in _well_formed():
            client.request(method, path, **options)
        plain = _answers(client)
    return lean, plain, took_lean


def test_every_answer_is_fastapis(answers: tuple[list, list, list[bool]]) -> None:
    lean, plain, _ = answers
    differences = [
        (request, a, b) for request, a, b in zip(REQUESTS, lean, plain, strict=True) if a != b
    ]
    assert not differences, differences[:2]


def test_well_formed_requests_take_the_lean_path(answers: tuple[list, list, list[bool]]) -> None:
    *_, took_lean = answers
    assert took_lean == [True] * len(list(_well_formed()))
