"""The micro-batching queue, with the real encoder behind a gate that the test opens.

While the gate is shut the encoder thread is busy, so what is queued, merged and refused is
decided by the test, not by timing.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
import numpy as np
import pytest

from bundle import load_bundle
from service.app import create_app
from service.batching import MicroBatcher
from service.encoder import Encoded, OnnxEncoder
from service.errors import NotReady, Overloaded
from service.metrics import Metrics
from service.startup import load_runtime
from tests.service.helpers import make_settings

pytestmark = pytest.mark.anyio
WAIT_S = 30.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def encoder(tiny_bundle_dir: Path) -> OnnxEncoder:
    return OnnxEncoder(tiny_bundle_dir, load_bundle(tiny_bundle_dir), threads=1)


class GatedEncoder:
    """The real encoder, recording batch sizes; each call waits until the gate is open."""

    def __init__(self, encoder: OnnxEncoder) -> None:
        self.encoder = encoder
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.batch_sizes: list[int] = []

    def __call__(self, texts: list[str]) -> Encoded:
        self.batch_sizes.append(len(texts))
        self.entered.set()
        if not self.gate.wait(WAIT_S):
            raise TimeoutError("the test never opened the gate")
        return self.encoder.encode(texts)


async def _until(condition: Callable[[], bool]) -> None:
    """Yield to the event loop until ``condition`` holds (a bound on steps, not on time)."""
    for _ in range(100_000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition never held")


def _batcher(
    gated: GatedEncoder, max_batch: int = 8, max_depth: int = 16, metrics: Metrics | None = None
) -> MicroBatcher:
    return MicroBatcher(
        gated, metrics or Metrics(), max_batch=max_batch, max_wait_s=0.0, max_depth=max_depth
    )


def _assert_encodes(encoder: OnnxEncoder, texts: Sequence[str], encoded: Encoded) -> None:
    expected = encoder.encode(texts)
    np.testing.assert_allclose(encoded.vectors, expected.vectors, atol=1e-4)
    np.testing.assert_array_equal(encoded.tokens, expected.tokens)


async def test_requests_queued_during_a_batch_are_merged_in_order(encoder: OnnxEncoder) -> None:
    gated = GatedEncoder(encoder)
    batcher = _batcher(gated)
    batcher.start()
    first = asyncio.create_task(batcher.embed(["the first request"]))
    await _until(gated.entered.is_set)
    second_texts = ["transfer money", "what is my balance", "freeze my card"]
    third_texts = ["set a timer", "a longer text about booking a table for four people tonight"]
    second = asyncio.create_task(batcher.embed(second_texts))
    third = asyncio.create_task(batcher.embed(third_texts))
    await _until(lambda: batcher.depth == 5)
    # The encoder thread is blocked, and the event loop still runs other work.
    assert await asyncio.wait_for(asyncio.sleep(0, result="loop alive"), WAIT_S) == "loop alive"
    gated.gate.set()
    results = await asyncio.gather(first, second, third)
    assert gated.batch_sizes == [1, 5]
    _assert_encodes(encoder, ["the first request"], results[0])
    _assert_encodes(encoder, second_texts, results[1])
    _assert_encodes(encoder, third_texts, results[2])
    await batcher.stop()


async def test_a_large_request_is_split_into_max_batch_chunks(encoder: OnnxEncoder) -> None:
    gated = GatedEncoder(encoder)
    gated.gate.set()
    batcher = _batcher(gated, max_batch=4)
    batcher.start()
    texts = [f"request text number {i}" for i in range(10)]
    encoded = await batcher.embed(texts)
    assert gated.batch_sizes == [4, 4, 2]
    _assert_encodes(encoder, texts, encoded)
    await batcher.stop()


async def test_a_full_queue_refuses_at_once_and_recovers(encoder: OnnxEncoder) -> None:
    gated = GatedEncoder(encoder)
    batcher = _batcher(gated, max_batch=2, max_depth=4)
    batcher.start()
    running = asyncio.create_task(batcher.embed(["in the encoder"]))
    await _until(gated.entered.is_set)
    queued = asyncio.create_task(batcher.embed(["one", "two", "three"]))
    await _until(lambda: batcher.depth == 3)
    with pytest.raises(Overloaded) as refused:
        await batcher.embed(["four", "five"])
    assert refused.value.retry_after_s >= 1
    assert refused.value.headers() == {"Retry-After": str(refused.value.retry_after_s)}
    assert "4 texts" in refused.value.message
    fits = asyncio.create_task(batcher.embed(["four"]))
    gated.gate.set()
    await asyncio.gather(running, queued, fits)
    assert batcher.depth == 0
    await batcher.stop()


async def test_stop_fails_waiting_and_running_requests(encoder: OnnxEncoder) -> None:
    gated = GatedEncoder(encoder)
    batcher = _batcher(gated)
    batcher.start()
    running = asyncio.create_task(batcher.embed(["in the encoder"]))
    await _until(gated.entered.is_set)
    waiting = asyncio.create_task(batcher.embed(["waiting"]))
    await _until(lambda: batcher.depth == 1)
    stopping = asyncio.create_task(batcher.stop())
    await _until(lambda: waiting.done() and running.done())
    for task in (waiting, running):
        with pytest.raises(NotReady):
            task.result()
    assert not stopping.done()  # it waits for the encoder thread, without blocking the loop
    gated.gate.set()
    await stopping
    with pytest.raises(NotReady):
        await batcher.embed(["after stop"])


async def test_full_queue_is_http_429_with_retry_after(
    tiny_bundle_dir: Path, tmp_path: Path, encoder: OnnxEncoder
) -> None:
    settings = make_settings(
        tiny_bundle_dir, tmp_path / "index", queue_depth=4, max_texts=4, max_wait_ms=0
    )
    runtime = load_runtime(settings)
    gated = GatedEncoder(encoder)
    runtime.batcher = _batcher(gated, max_batch=2, max_depth=4, metrics=runtime.metrics)
    app = create_app(settings, runtime)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://fractal") as client,
    ):
        running = asyncio.create_task(client.post("/embed", json={"texts": ["a"]}))
        await _until(gated.entered.is_set)
        queued = asyncio.create_task(client.post("/embed", json={"texts": ["b", "c", "d"]}))
        await _until(lambda: runtime.batcher.depth == 3)
        refused = await client.post("/embed", json={"texts": ["e", "f"]})
        assert refused.status_code == 429
        assert int(refused.headers["Retry-After"]) >= 1
        assert refused.json()["error"]["type"] == "overloaded"
        metrics = (await client.get("/metrics")).text
        assert "fractal_queue_depth 3.0" in metrics
        assert 'fractal_errors_total{kind="overloaded"} 1.0' in metrics
        gated.gate.set()
        assert (await running).status_code == 200
        assert (await queued).status_code == 200
