"""The micro-batching queue, with the real encoder behind a gate that the test opens
(:mod:`tests.service.gated`): merging, splitting, refusing, deadlines, cancelled requests, and
which queued texts make a batch (by length or in arrival order), with its settings."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import numpy as np
import pytest
from pydantic import ValidationError

from encoding import TokenIds
from encoding.encoder import Encoded, EncoderInput, OnnxEncoder
from encoding.length_batches import padded_tokens
from service.app import create_app
from service.batching import (
    CALLER,
    INLINE_TOKENISE_CHARS,
    INLINE_TOKENISE_TEXTS,
    Caller,
    MicroBatcher,
)
from service.errors import ClientDisconnected, DeadlineExceeded, NotReady, Overloaded
from service.metrics import Metrics
from service.settings import Settings, describe_settings_error
from service.startup import load_runtime
from tests.service.gated import WAIT_S, GatedEncoder, SteppedEncoder, gated_batcher, until
from tests.service.helpers import make_settings, serve

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
    def slow_encode(token_ids: list[TokenIds]) -> Encoded:
        time.sleep(0.1 * len(token_ids))  # at least 0.1 s a text
        return encoder.encode(token_ids)

    batcher = MicroBatcher(
        slow_encode,
        Metrics(),
        max_batch=1,
        max_wait_s=0.0,
        max_depth=64,
        tokenize=encoder.token_ids,
    )
    batcher.start()
    await batcher.embed(["measured"])
    waiting = asyncio.create_task(batcher.embed([f"text {i}" for i in range(30)]))
    await until(lambda: batcher.depth == 29)
    assert batcher.retry_after_s() >= 3  # 30 texts of at least 0.1 s each
    waiting.cancel()
    await until(lambda: batcher.depth == 0)
    assert batcher.retry_after_s() == 1
    await batcher.stop()


# -- which texts make a batch ------------------------------------------------------------------

SHORT = "short text"
LONG = "a much longer text, about three times as long as the short ones"


def _lengths(encoder: OnnxEncoder, texts: Sequence[str]) -> list[int]:
    return [len(ids) for ids in encoder.token_ids(texts)]


@pytest.mark.parametrize(
    "policy, expected",
    [("length", [[0, 2], [1, 3]]), ("fifo", [[0, 1], [2, 3]])],
)
async def test_the_policy_decides_which_queued_texts_make_a_batch(
    encoder: OnnxEncoder, policy: str, expected: list[list[int]]
) -> None:
    gated = GatedEncoder(encoder)
    batcher = gated_batcher(gated, Metrics(), max_batch=2, policy=policy)
    batcher.start()
    running = asyncio.create_task(batcher.embed(["in the encoder"]))
    await until(gated.entered.is_set)
    first_texts, second_texts = [SHORT, LONG], [SHORT + "s", LONG + "s"]
    first = asyncio.create_task(batcher.embed(first_texts))
    second = asyncio.create_task(batcher.embed(second_texts))
    await until(lambda: batcher.depth == 4)
    gated.gate.set()
    await running
    _assert_encodes(encoder, first_texts, await first)  # each request's rows in its order
    _assert_encodes(encoder, second_texts, await second)
    # Queued: the first request's short and long text, then the second's.
    queued = _lengths(encoder, [*first_texts, *second_texts])
    assert gated.batch_lengths[1:] == [[queued[p] for p in batch] for batch in expected]
    await batcher.stop()


async def test_a_long_text_is_not_starved_by_a_stream_of_short_ones(
    encoder: OnnxEncoder,
) -> None:
    stepped = SteppedEncoder(encoder)
    batcher = gated_batcher(stepped, Metrics(), max_batch=4, max_depth=64)
    batcher.start()
    requests = [asyncio.create_task(batcher.embed(["in the encoder"]))]
    await until(stepped.entered.is_set)
    requests += [asyncio.create_task(batcher.embed([SHORT])) for _ in range(4)]
    long = asyncio.create_task(batcher.embed([LONG]))
    await until(lambda: batcher.depth == 5)
    for call in range(1, 4):
        # Before each batch, four more short texts arrive, all closer in length to each other.
        requests += [asyncio.create_task(batcher.embed([SHORT])) for _ in range(4)]
        await until(lambda: batcher.depth == 9)
        stepped.step()
        await until(lambda call=call: len(stepped.batch_sizes) == call + 1)
    short_length, long_length = _lengths(encoder, [SHORT, LONG])
    # The 4 short texts queued before the long one go first; then the long one is the oldest,
    # and is in the very next batch, though newer short texts keep coming.
    assert stepped.batch_lengths[1] == [short_length] * 4
    assert stepped.batch_lengths[2] == [long_length] + [short_length] * 3
    assert stepped.batch_lengths[3] == [short_length] * 4
    for _ in range(len(requests)):
        stepped.step()
    _assert_encodes(encoder, [LONG], await long)
    await asyncio.gather(*requests)
    await batcher.stop()


async def test_every_batch_stays_within_the_token_budget(encoder: OnnxEncoder) -> None:
    gated = GatedEncoder(encoder)
    texts = [SHORT, LONG, SHORT + "!", LONG + "!", "mid-length text here", "x", LONG[:40]]
    lengths = _lengths(encoder, texts)
    budget = 3 * max(lengths)
    batcher = gated_batcher(gated, Metrics(), max_batch=8, batch_tokens=budget)
    batcher.start()
    running = asyncio.create_task(batcher.embed(["in the encoder"]))
    await until(gated.entered.is_set)
    queued = [asyncio.create_task(batcher.embed([text])) for text in texts]
    await until(lambda: batcher.depth == len(texts))
    gated.gate.set()
    await running
    for task, text in zip(queued, texts, strict=True):
        _assert_encodes(encoder, [text], await task)
    batches = gated.batch_lengths[1:]
    assert sorted(length for batch in batches for length in batch) == sorted(lengths)
    assert len(batches) > 1  # all 7 in one batch would be 7 × the longest, over the budget
    assert all(padded_tokens(batch) <= budget for batch in batches)
    await batcher.stop()


async def test_large_requests_are_tokenised_in_a_thread_small_ones_on_the_event_loop(
    encoder: OnnxEncoder,
) -> None:
    threads: list[threading.Thread] = []

    def tokenize(inputs: Sequence[EncoderInput]) -> list[TokenIds]:
        threads.append(threading.current_thread())
        return encoder.token_ids(inputs)

    gated = GatedEncoder(encoder)
    gated.gate.set()
    batcher = MicroBatcher(
        gated, Metrics(), max_batch=8, max_wait_s=0.0, max_depth=16, tokenize=tokenize
    )
    batcher.start()
    small = ["a short query", "and another"]
    long = ["x" * (INLINE_TOKENISE_CHARS // 2 + 1), "y" * (INLINE_TOKENISE_CHARS // 2)]
    many = [f"text {i}" for i in range(INLINE_TOKENISE_TEXTS + 1)]
    for texts in (small, long, many):
        _assert_encodes(encoder, texts, await batcher.embed(texts))
    loop_thread = threading.current_thread()
    assert [thread is loop_thread for thread in threads] == [True, False, False]
    await batcher.stop()


async def test_a_caller_that_leaves_while_its_texts_are_tokenised_queues_nothing(
    encoder: OnnxEncoder,
) -> None:
    tokenising, release = threading.Event(), threading.Event()

    def tokenize(inputs: Sequence[EncoderInput]) -> list[TokenIds]:
        tokenising.set()
        release.wait(WAIT_S)
        return encoder.token_ids(inputs)

    gated = GatedEncoder(encoder)
    batcher = MicroBatcher(
        gated, Metrics(), max_batch=8, max_wait_s=0.0, max_depth=16, tokenize=tokenize
    )
    batcher.start()
    caller = Caller()

    async def request() -> Encoded:
        CALLER.set(caller)
        return await batcher.embed(["z" * (INLINE_TOKENISE_CHARS + 1)])

    leaving = asyncio.create_task(request())
    await until(tokenising.is_set)
    caller.leave()
    release.set()
    with pytest.raises(ClientDisconnected):
        await leaving
    assert batcher.depth == 0 and gated.batch_sizes == []
    await batcher.stop()


# -- settings ------------------------------------------------------------------------------------


def test_batching_settings_reach_the_queue_the_encoder_and_info(
    tiny_bundle_dir: Path, tmp_path: Path
) -> None:
    settings = make_settings(
        tiny_bundle_dir,
        tmp_path / "index",
        batch_policy="fifo",
        batch_tokens=4096,
        batch_window=64,
        max_batch_size=16,
    )
    with serve(settings) as client:
        runtime = client.app.state.runtime
        assert runtime.batcher.policy == "fifo"
        assert runtime.batcher.window == 16  # fifo looks at the max_batch oldest only
        assert runtime.batcher.batch_tokens == runtime.encoder.batch_tokens == 4096
        limits = client.get("/info").json()["limits"]
    assert (limits["batch_policy"], limits["batch_tokens"], limits["batch_window"]) == (
        "fifo",
        4096,
        64,
    )
    defaults = Settings(bundle_dir=tiny_bundle_dir)
    assert (defaults.batch_policy, defaults.batch_tokens, defaults.batch_window) == (
        "length",
        2048,
        128,
    )


@pytest.mark.parametrize(
    "variables, message",
    [
        (
            {"FRACTAL_BATCH_POLICY": "shortest"},
            "FRACTAL_BATCH_POLICY: Input should be 'length' or 'fifo'",
        ),
        (
            {"FRACTAL_BATCH_TOKENS": "0"},
            "FRACTAL_BATCH_TOKENS: Input should be greater than or equal to 1",
        ),
        (
            {"FRACTAL_BATCH_WINDOW": "16", "FRACTAL_MAX_BATCH_SIZE": "32"},
            "batch_window (16) must be at least max_batch_size (32)",
        ),
    ],
)
def test_bad_batching_settings_are_refused_with_what_is_wrong(
    tiny_bundle_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    variables: dict[str, str],
    message: str,
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as error:
        Settings(bundle_dir=tiny_bundle_dir)
    assert message in describe_settings_error(error.value)


def test_a_small_window_is_fine_for_the_fifo_policy(
    tiny_bundle_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FRACTAL_BATCH_POLICY", "fifo")
    monkeypatch.setenv("FRACTAL_BATCH_WINDOW", "1")
    assert Settings(bundle_dir=tiny_bundle_dir).batch_window == 1


async def test_queries_are_encoded_before_bulk_texts_that_came_first(
    encoder: OnnxEncoder,
) -> None:
    gated = SteppedEncoder(encoder)
    batcher = _batcher(gated, max_batch=4, max_depth=64)
    batcher.start()
    running = asyncio.create_task(batcher.embed(["a document being stored"], bulk=True))
    await until(lambda: gated.batch_sizes == [1])  # the encoder is busy with it
    documents = [f"document number {i} of the ingest" for i in range(12)]
    ingest = asyncio.create_task(batcher.embed(documents, bulk=True))
    await until(lambda: batcher.depth == 12)
    query = asyncio.create_task(batcher.embed(["where is my card"]))
    await until(lambda: batcher.depth == 13)
    gated.step()  # the running batch
    await until(lambda: len(gated.batch_sizes) == 2)
    assert gated.batch_sizes[1] == 1  # the query's batch, alone
    # A query waits for the batch being encoded and for the queries ahead of it, not for
    # the bulk texts queued before it; admission estimates its wait the same way.
    per_text = batcher.estimated_wait_s()
    assert per_text is not None and batcher.estimated_wait_s(bulk=True) == 13 * per_text
    gated.step()
    _assert_encodes(encoder, ["where is my card"], await query)
    assert not ingest.done()
    for _ in range(3):
        gated.step()
    _assert_encodes(encoder, documents, await ingest)
    await running
    assert gated.batch_sizes == [1, 1, 4, 4, 4]
    await batcher.stop()


async def test_bulk_texts_still_get_a_turn_under_a_stream_of_queries(
    encoder: OnnxEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("service.batching.BULK_TURN_S", 0.0)
    gated = SteppedEncoder(encoder)
    batcher = _batcher(gated, max_batch=2, max_depth=64)
    batcher.start()
    running = asyncio.create_task(batcher.embed(["a query already running"]))
    await until(lambda: gated.batch_sizes == [1])
    ingest = asyncio.create_task(batcher.embed(["first document", "second document"], bulk=True))
    queries = [asyncio.create_task(batcher.embed([f"query {i}"])) for i in range(4)]
    await until(lambda: batcher.depth == 6)
    gated.step()
    await until(lambda: len(gated.batch_sizes) == 2)
    # With the turn due at once, the bulk lane is served although queries wait.
    gated.step()
    await asyncio.wait_for(ingest, WAIT_S)
    assert not any(query.done() for query in queries)
    for _ in range(2):
        gated.step()
    await asyncio.gather(running, *queries)
    assert gated.batch_sizes == [1, 2, 2, 2]
    await batcher.stop()
