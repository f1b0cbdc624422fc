"""Admission control on the real app (:mod:`service.admission`), driven at the ASGI level so that
the tests see what the server would: whether the body was read, what was sent, a disconnect.

The encoder sits behind a gate (:mod:`tests.service.gated`), so the queue's state is the test's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from encoding.encoder import OnnxEncoder
from service.admission import encodes
from service.app import create_app
from service.runtime import Runtime
from service.startup import load_runtime
from tests.service.gated import WAIT_S, GatedEncoder, gated_batcher, until
from tests.service.helpers import make_settings

pytestmark = pytest.mark.anyio


@dataclass
class Exchange:
    """One request driven at the ASGI level: the body is handed out as ``chunks`` (then the
    call waits for ``gone`` and reports a disconnect); ``reads`` counts the app's receive
    calls, ``sent`` keeps what it sent."""

    chunks: list[bytes]
    gone: asyncio.Event = field(default_factory=asyncio.Event)
    reads: int = 0
    sent: list[dict[str, Any]] = field(default_factory=list)

    async def receive(self) -> dict[str, Any]:
        self.reads += 1
        if self.chunks:
            body = self.chunks.pop(0)
            return {"type": "http.request", "body": body, "more_body": bool(self.chunks)}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int:
        return self.sent[0]["status"]

    @property
    def headers(self) -> dict[str, str]:
        return {name.decode(): value.decode() for name, value in self.sent[0]["headers"]}

    def json(self) -> Any:
        return json.loads(b"".join(message.get("body", b"") for message in self.sent[1:]))


def _scope(method: str, path: str, body_size: int = 0) -> dict[str, Any]:
    headers = [(b"content-type", b"application/json")]
    if body_size:
        headers.append((b"content-length", str(body_size).encode()))
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }


def _embed(app: FastAPI, texts: list[str], chunks: int = 1) -> tuple[Exchange, Awaitable[None]]:
    """``POST /embed`` of ``texts``, its body in ``chunks`` parts; the exchange and the app's
    call (not yet awaited)."""
    body = json.dumps({"texts": texts}).encode()
    step = -(-len(body) // chunks)
    exchange = Exchange([body[start : start + step] for start in range(0, len(body), step)])
    call = app(_scope("POST", "/embed", len(body)), exchange.receive, exchange.send)
    return exchange, call


@dataclass
class Served:
    app: FastAPI
    runtime: Runtime
    gated: GatedEncoder

    def sample(self, name: str, **labels: str) -> float:
        value = self.runtime.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    async def warm(self) -> None:
        """One request through the open gate, so the queue has measured a text's cost; the
        gate is shut again after."""
        self.gated.gate.set()
        exchange, call = _embed(self.app, ["warm up"])
        await asyncio.wait_for(call, WAIT_S)
        assert exchange.status == 200
        self.gated.gate.clear()
        self.gated.entered.clear()
        self.gated.batch_sizes.clear()

    async def occupy_encoder(self) -> asyncio.Task[None]:
        """A request whose text is in the (shut) encoder once this returns."""
        exchange, call = _embed(self.app, ["in the encoder"])
        task = asyncio.ensure_future(call)
        await until(self.gated.entered.is_set)
        task.exchange = exchange  # type: ignore[attr-defined]
        return task


@pytest.fixture
def serve_gated(tiny_bundle_dir: Path, tmp_path: Path, encoder: OnnxEncoder) -> Callable[..., Any]:
    """``async with serve_gated(batcher options, **settings) as served``: the app, started,
    with its queue in front of a gated encoder."""

    @asynccontextmanager
    async def serve(batcher: dict[str, float], **settings: Any) -> AsyncIterator[Served]:
        runtime = load_runtime(make_settings(tiny_bundle_dir, tmp_path / "index", **settings))
        gated = GatedEncoder(encoder)
        runtime.batcher = gated_batcher(gated, runtime.metrics, **batcher)
        app = create_app(runtime.settings, runtime)
        async with app.router.lifespan_context(app):
            try:
                yield Served(app, runtime, gated)
            finally:
                gated.gate.set()

    return serve


async def test_overloaded_queue_sheds_before_reading_the_body(
    serve_gated: Callable[..., Any],
) -> None:
    async with serve_gated({"queue_deadline_s": 1e-9}) as served:
        await served.warm()
        running = await served.occupy_encoder()
        exchange, call = _embed(served.app, ["shed", "me"], chunks=4)
        await asyncio.wait_for(call, WAIT_S)
        assert exchange.reads == 0  # answered from the method and path alone
        assert exchange.status == 429
        estimate = served.runtime.batcher.estimated_wait_s()
        assert estimate is not None
        assert int(exchange.headers["retry-after"]) == max(1, -int(-estimate // 1))
        error = exchange.json()["error"]
        assert error["type"] == "overloaded" and "estimated wait" in error["message"]
        assert set(error) == {"type", "message", "param"}
        assert served.sample("fractal_requests_shed_total", reason="queue_wait") == 1
        assert served.sample("fractal_errors_total", kind="overloaded") == 1
        # Routes that do not encode are not shed.
        health = Exchange([b""])
        await served.app(_scope("GET", "/health"), health.receive, health.send)
        assert health.status == 200
        served.gated.gate.set()
        await asyncio.wait_for(running, WAIT_S)
        assert running.exchange.status == 200  # type: ignore[attr-defined]
        assert served.gated.batch_sizes == [1]


async def test_nothing_is_shed_before_a_measurement(serve_gated: Callable[..., Any]) -> None:
    async with serve_gated({"queue_deadline_s": 1e-9}) as served:
        running = await served.occupy_encoder()
        exchange, call = _embed(served.app, ["queued"])
        task = asyncio.ensure_future(call)
        await until(lambda: served.runtime.batcher.depth == 1)
        served.gated.gate.set()
        await asyncio.wait_for(asyncio.gather(running, task), WAIT_S)
        assert exchange.status == 200


async def test_a_disconnected_clients_texts_are_dropped(serve_gated: Callable[..., Any]) -> None:
    async with serve_gated({}) as served:
        running = await served.occupy_encoder()
        exchange, call = _embed(served.app, ["left", "behind", "texts"])
        task = asyncio.ensure_future(call)
        await until(lambda: served.runtime.batcher.depth == 3)
        exchange.gone.set()
        await asyncio.wait_for(task, WAIT_S)  # the request ends at once
        assert exchange.status == 499  # sent to nobody; it labels the request's metrics
        assert exchange.json()["error"]["type"] == "client_disconnected"
        assert served.runtime.batcher.depth == 0
        assert served.sample("fractal_requests_shed_total", reason="disconnected") == 1
        full = str(served.runtime.manifest.dim)
        labels = {"endpoint": "/embed", "granularity": "", "dimension": full, "index": ""}
        assert served.sample("fractal_request_duration_seconds_count", **labels, status="499") == 1
        served.gated.gate.set()
        await asyncio.wait_for(running, WAIT_S)
        assert served.gated.batch_sizes == [1]  # the dropped texts were never encoded


async def test_a_request_past_its_deadline_is_504(serve_gated: Callable[..., Any]) -> None:
    async with serve_gated({"timeout_s": 0.05}) as served:
        running = await served.occupy_encoder()
        exchange, call = _embed(served.app, ["too", "late"])
        await asyncio.wait_for(call, WAIT_S)
        assert exchange.status == 504
        error = exchange.json()["error"]
        assert error["type"] == "deadline_exceeded"
        assert served.sample("fractal_requests_shed_total", reason="deadline") == 1
        served.gated.gate.set()
        await asyncio.wait_for(running, WAIT_S)
        assert served.gated.batch_sizes == [1]


async def test_concurrency_limit_is_429_before_the_body(serve_gated: Callable[..., Any]) -> None:
    async with serve_gated({}, limit_concurrency=1) as served:
        running = await served.occupy_encoder()
        exchange, call = _embed(served.app, ["one too many"])
        await asyncio.wait_for(call, WAIT_S)
        assert exchange.reads == 0
        assert exchange.status == 429
        assert exchange.headers["retry-after"] == "1"
        assert exchange.json()["error"]["type"] == "overloaded"
        assert served.sample("fractal_requests_shed_total", reason="concurrency") == 1
        served.gated.gate.set()
        await asyncio.wait_for(running, WAIT_S)


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("POST", "/embed", True),
        ("POST", "/v1/embeddings", True),
        ("POST", "/documents", True),
        ("POST", "/collections/notes/documents", True),
        ("POST", "/search", True),
        ("GET", "/search", True),
        ("POST", "/documents/vectors", False),
        ("POST", "/documents/lookup", False),
        ("POST", "/collections/notes/documents/vectors", False),
        ("GET", "/documents/abc", False),
        ("GET", "/embed", False),
        ("GET", "/health", False),
    ],
)
def test_which_routes_encode(method: str, path: str, expected: bool) -> None:
    assert encodes({"method": method, "path": path}) is expected
