"""Requests of every shape a client may send, most of them malformed (wrong types, huge and
negative numbers, nulls, nested junk, unusual Unicode, broken JSON, wrong methods and media
types), to every endpoint: ``(method, path, TestClient request options)``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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


def malformed_requests() -> Iterator[tuple[str, str, dict]]:
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
    for model in [MODEL, "unknown", "%00", "%ff%fe", "a/b/../c", "🙂", "x" * 5000, "%2F", " "]:
        yield "GET", f"/v1/models/{model}", {"params": {"junk": "🙂"}}
        yield "DELETE", f"/v1/models/{model}", {}
    yield "POST", "/v1/models", {"json": {}}
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
