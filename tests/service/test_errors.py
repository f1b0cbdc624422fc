"""No client input produces a 500, and every error answer has the one JSON shape.

A batch of malformed requests (wrong types, huge and negative numbers, nulls, nested junk,
unusual Unicode, broken JSON, wrong methods and media types) is thrown at every endpoint of a
running app; each must get an answer below 500, and every 4xx must be ``{"error": {...}}``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.service.helpers import make_settings, serve

MODEL = "clinc150-v5-small"
JSON = {"content-type": "application/json"}
UNICODE = [
    "😀🔥 emoji",
    "مرحبا بالعالم",
    "zero\u200bwidth\u200djoiners",
    "nul \u0000 inside",
    "\ufeffbom",
    "e\u0301 combining",
    "\U0010ffff last code point",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
]
JUNK: list[Any] = [
    None,
    True,
    0,
    -1,
    10**30,
    1.5,
    1e308,
    "",
    "text",
    [],
    [None],
    [[["nested"]]],
    {"a": {"b": [1, {"c": None}]}},
    ["ok", 3],
    [{"text": "x"}],
]


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


RAW_BODIES = [
    b"",
    b"{",
    b"not json",
    b"\xff\xfe\x00garbage",
    b"null",
    b"[]",
    b'"just a string"',
    b"123",
    b'{"texts": ["a"]}{"texts": ["b"]}',
    _deep(100_000).encode(),
    b'{"texts": ' + _deep(5000).encode() + b"}",
    b'{"texts": ["\\ud800"]}',
    b'{"texts": [NaN]}',
    b'{"k": Infinity, "queries": ["a"]}',
]


def _bodies(fields: list[str]) -> Iterator[dict]:
    """Each field of a valid body replaced by each junk value, and the body with it missing."""
    for field in fields:
        yield {}
        for junk in JUNK:
            yield {field: junk}


@pytest.fixture(scope="module")
def client(v5_bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_settings(v5_bundle_dir, tmp_path_factory.mktemp("errors-index"))
    with serve(settings, raise_server_exceptions=False) as client:
        client.post("/documents", json={"documents": [{"id": "known", "text": "hello"}]})
        yield client


def _requests() -> Iterator[tuple[str, str, dict]]:
    valid = {
        "/embed": {"texts": ["a"], "dims": 64, "granularity": None, "normalize": True},
        "/v1/embeddings": {
            "model": MODEL,
            "input": ["a"],
            "dimensions": 64,
            "encoding_format": "float",
            "user": "u",
        },
        "/documents": {"documents": [{"id": "d", "text": "a", "metadata": {}}]},
        "/search": {
            "queries": ["a"],
            "k": 3,
            "granularity": "auto",
            "index": "exact",
            "rerank": "c2f",
            "scoring": "cosine",
        },
    }
    for path, body in valid.items():
        for change in _bodies(list(body)):
            yield "POST", path, {"json": {**body, **change}}
        for raw in RAW_BODIES:
            yield "POST", path, {"content": raw, "headers": JSON}
        yield (
            "POST",
            path,
            {"content": b'{"texts": ["a"]}', "headers": {"content-type": "text/plain"}},
        )
        yield "PUT", path, {"json": body}
        for text in UNICODE:
            yield "POST", path, {"json": _with_text(path, body, text)}
    search_params = {
        "q": "a",
        "k": "3",
        "granularity": "fine",
        "index": "hnsw",
        "rerank": "none",
        "scoring": "cosine",
    }
    for name in search_params:
        for junk in ["", "-1", "0", "1e3", str(10**30), "nan", "null", "[1]", "auto", "🙂", "\x00"]:
            yield "GET", "/search", {"params": {**search_params, name: junk}}
        yield "GET", "/search", {"params": {k: v for k, v in search_params.items() if k != name}}
    yield "GET", "/search", {"params": [("q", "a"), ("k", "1"), ("k", "2")]}
    for text in UNICODE:
        yield "GET", "/search", {"params": {"q": text, "granularity": "auto"}}
    for doc_id in ["unknown", "%00", "%ff%fe", "a/b/../c", "🙂", "x" * 5000, "%2F", " "]:
        yield "GET", f"/documents/{doc_id}", {}
        yield "DELETE", f"/documents/{doc_id}", {}
    yield "POST", "/documents/known", {"json": {}}
    for path in ["/health", "/ready", "/info", "/metrics"]:
        yield "POST", path, {"json": {}}
        yield "GET", path, {"params": {"junk": "🙂"}}
    yield "GET", "/no-such-endpoint", {}


def _with_text(path: str, body: dict, text: str) -> dict:
    if path == "/embed":
        return {"texts": [text, text * 3]}
    if path == "/v1/embeddings":
        return {**body, "input": text}
    if path == "/documents":
        return {"documents": [{"id": text, "text": text, "metadata": {text: [text]}}]}
    return {**body, "queries": [text]}


def test_no_malformed_request_gets_a_5xx(client: TestClient) -> None:
    failures = []
    requests = list(_requests())
    for method, path, options in requests:
        response = client.request(method, path, **options)
        if response.status_code >= 500:
            failures.append((method, path, options, response.status_code, response.text[:200]))
        elif response.status_code >= 400:
            error = response.json()["error"]
            assert set(error) == {"type", "message", "param"}, (method, path, options)
            assert error["type"] and error["message"], (method, path, options)
    assert not failures, failures
    assert len(requests) > 300


def test_errors_are_counted_by_type(client: TestClient) -> None:
    client.get("/search", params={"q": "a", "k": "-1"})
    client.get("/documents/nothing-here")
    metrics = client.get("/metrics").text
    assert 'fractal_errors_total{kind="invalid_request"}' in metrics
    assert 'fractal_errors_total{kind="not_found"}' in metrics
    assert 'fractal_errors_total{kind="internal_error"}' not in metrics


@pytest.mark.parametrize(
    ("method", "path", "status", "kind"),
    [
        ("PUT", "/embed", 405, "method_not_allowed"),
        ("GET", "/nowhere", 404, "not_found"),
    ],
)
def test_starlette_errors_use_the_shape(
    client: TestClient, method: str, path: str, status: int, kind: str
) -> None:
    response = client.request(method, path)
    assert response.status_code == status
    assert response.json()["error"]["type"] == kind


def test_invalid_json_is_a_422_that_says_so(client: TestClient) -> None:
    response = client.post("/embed", content=b'{"texts": [', headers=JSON)
    assert response.status_code == 422
    assert response.json()["error"]["message"].startswith("the body is not valid JSON")
