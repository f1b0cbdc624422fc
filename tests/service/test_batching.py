"""The micro-batching queue, with the real encoder behind a gate that the test opens
(:mod:`tests.service.gated`): merging, splitting, refusing, deadlines, cancelled requests."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import numpy as np
import pytest

from service.app import create_app
from service.batching import CALLER, Caller, MicroBatcher
from service.encoder import Encoded, OnnxEncoder
from service.errors import ClientDisconnected, DeadlineExceeded, NotReady, Overloaded
from service.metrics import Metrics
from service.startup import load_runtime
from tests.service.gated import WAIT_S, GatedEncoder, gated_batcher, until
from tests.service.helpers import make_settings

pytestmark = pytest.mark.anyio


def _batcher(
    gated: GatedEncoder, max_batch: int = 8, max_depth: int = 16, metrics: Metrics | None = None
) -> MicroBatcher:
    return gated_batcher(gated, metrics or Metrics(), max_batch=max_batch, max_depth=max_depth)


def _assert_encodes(encoder: OnnxEncoder, texts: Sequence[str], encoded: Encoded) -> None:
    expected = encoder.encode(texts)
    np.testing.assert_allclose(encoded.vectors, expected.vectors, atol=1e-4)
    np.testing.assert_array_equal(encoded.tokens, expected.tokens)


async def test_requests_queued_during_a_batch_are_merged_in_order(encoder: OnnxEncoder) -> None:
    gated = GatedEncoder(encoder)
    batcher = _batcher(gated)
    batcher.start()
    first = asyncio.create_task(batcher.embed(["the first request"]))
    await until(gated.entered.is_set)
    second_texts = ["transfer money", "what is my balance", "freeze my card"]
    third_texts = ["set a timer", "a longer text about booking a table for four people tonight"]
    second = asyncio.create_task(batcher.embed(second_texts))
    third = asyncio.create_task(batcher.embed(third_texts))
    await until(lambda: batcher.depth == 5)
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
    await until(gated.entered.is_set)
    queued = asyncio.create_task(batcher.embed(["one", "two", "three"]))
    await until(lambda: batcher.depth == 3)
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
    await until(gated.entered.is_set)
    waiting = asyncio.create_task(batcher.embed(["waiting"]))
    await until(lambda: batcher.depth == 1)
    stopping = asyncio.create_task(batcher.stop())
    await until(lambda: waiting.done() and running.done())
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
        await until(gated.entered.is_set)
        queued = asyncio.create_task(client.post("/embed", json={"texts": ["b", "c", "d"]}))
        await until(lambda: runtime.batcher.depth == 3)
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


def _shed(metrics: Metrics, reason: str) -> float:
    value = metrics.registry.get_sample_value("fractal_requests_shed_total", {"reason": reason})
    assert value is not None
    return value


async def test_expired_texts_are_dropped_unencoded(encoder: OnnxEncoder) -> None:
    gated = GatedEncoder(encoder)
    metrics = Metrics()
    batcher = gated_batcher(gated, metrics, timeout_s=0.05)
    batcher.start()
    running = asyncio.create_task(batcher.embed(["in the encoder"]))
    await until(gated.entered.is_set)
    with pytest.raises(DeadlineExceeded) as expired:
        await asyncio.wait_for(batcher.embed(["too late", "also too late"]), WAIT_S)
    assert expired.value.status == 504
    assert batcher.depth == 0
    assert _shed(metrics, "deadline") == 1
    gated.gate.set()
    _assert_encodes(encoder, ["in the encoder"], await running)  # in the encoder: not expired
    after = await batcher.embed(["after"])
    _assert_encodes(encoder, ["after"], after)
    assert gated.batch_sizes == [1, 1]  # the expired texts never reached the encoder
    await batcher.stop()


async def test_a_cancelled_request_leaves_the_queue(encoder: OnnxEncoder) -> None:
    gated = GatedEncoder(encoder)
    metrics = Metrics()
    batcher = gated_batcher(gated, metrics, max_depth=4)
    batcher.start()
    running = asyncio.create_task(batcher.embed(["in the encoder"]))
    await until(gated.entered.is_set)
    abandoned = asyncio.create_task(batcher.embed(["one", "two", "three", "four"]))
    await until(lambda: batcher.depth == 4)
    abandoned.cancel()
    await until(lambda: batcher.depth == 0)
    assert _shed(metrics, "disconnected") == 1
    assert metrics.registry.get_sample_value("fractal_queue_depth") == 0
    kept = asyncio.create_task(batcher.embed(["kept", "also kept"]))  # room again
    await until(lambda: batcher.depth == 2)
    gated.gate.set()
    await asyncio.gather(running, kept)
    assert gated.batch_sizes == [1, 2]  # the cancelled texts were skipped
    await batcher.stop()


async def test_a_caller_that_leaves_fails_its_wait_and_drops_its_texts(
    encoder: OnnxEncoder,
) -> None:
    gated = GatedEncoder(encoder)
    metrics = Metrics()
    batcher = gated_batcher(gated, metrics)
    batcher.start()
    running = asyncio.create_task(batcher.embed(["in the encoder"]))
    await until(gated.entered.is_set)
    caller = Caller()

    async def request() -> Encoded:
        CALLER.set(caller)
        return await batcher.embed(["left", "behind"])

    leaving = asyncio.create_task(request())
    await until(lambda: batcher.depth == 2)
    caller.leave()
    with pytest.raises(ClientDisconnected):
        await leaving
    assert batcher.depth == 0
    assert _shed(metrics, "disconnected") == 1
    with pytest.raises(ClientDisconnected):  # a caller that left queues nothing more
        await asyncio.create_task(request())
    assert batcher.depth == 0
    gated.gate.set()
    await running
    assert gated.batch_sizes == [1]
    await batcher.stop()


async def test_admission_sheds_on_the_measured_wait(encoder: OnnxEncoder) -> None:
    gated = GatedEncoder(encoder)
    metrics = Metrics()
    batcher = gated_batcher(gated, metrics, max_batch=1, max_depth=64, queue_deadline_s=1e-9)
    batcher.start()
    running = asyncio.create_task(batcher.embed(["in the encoder"]))
    await until(gated.entered.is_set)
    batcher.admit()  # nothing measured yet: only the depth counts
    assert batcher.estimated_wait_s() is None
    gated.gate.set()
    await running
    assert batcher.estimated_wait_s() == 0.0  # measured, and nothing queued
    batcher.admit()
    gated.gate.clear()
    gated.entered.clear()
    queued = asyncio.create_task(batcher.embed(["a", "b", "c"]))
    await until(gated.entered.is_set)
    estimate = batcher.estimated_wait_s()
    assert estimate is not None and estimate > 0
    with pytest.raises(Overloaded) as refused:
        batcher.admit()
    assert "estimated wait" in refused.value.message
    assert refused.value.retry_after_s == max(1, math.ceil(estimate))
    assert _shed(metrics, "queue_wait") == 1
    assert _shed(metrics, "queue_full") == 0
    gated.gate.set()
    await queued
    await batcher.stop()


async def test_retry_after_counts_the_queued_texts(encoder: OnnxEncoder) -> None:
    def slow_encode(texts: list[str]) -> Encoded:
        time.sleep(0.1 * len(texts))  # at least 0.1 s a text
        return encoder.encode(texts)

    batcher = MicroBatcher(slow_encode, Metrics(), max_batch=1, max_wait_s=0.0, max_depth=64)
    batcher.start()
    await batcher.embed(["measured"])
    waiting = asyncio.create_task(batcher.embed([f"text {i}" for i in range(30)]))
    await until(lambda: batcher.depth == 29)
    assert batcher.retry_after_s() >= 3  # 30 texts of at least 0.1 s each
    waiting.cancel()
    await until(lambda: batcher.depth == 0)
    assert batcher.retry_after_s() == 1
    await batcher.stop()
