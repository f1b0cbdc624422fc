"""The real encoder behind a gate that a test opens, for tests of the encoder queue: while the
gate is shut the encoder thread is busy, so what is queued, merged, refused or dropped is
decided by the test, not by timing. :class:`SteppedEncoder` lets one batch through at a time."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from encoding import TokenIds
from encoding.encoder import Encoded, OnnxEncoder
from service.batching import MicroBatcher
from service.metrics import Metrics

WAIT_S = 30.0
"""How long anything in these tests may wait before the test fails."""


class GatedEncoder:
    """The real encoder, recording each batch's size and token counts; each call waits until
    the gate is open."""

    def __init__(self, encoder: OnnxEncoder) -> None:
        self.encoder = encoder
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.batch_sizes: list[int] = []
        self.batch_lengths: list[list[int]] = []

    def __call__(self, token_ids: list[TokenIds]) -> Encoded:
        self.batch_sizes.append(len(token_ids))
        self.batch_lengths.append([len(ids) for ids in token_ids])
        self.entered.set()
        if not self._wait():
            raise TimeoutError("the test never opened the gate")
        return self.encoder.encode(token_ids)

    def _wait(self) -> bool:
        return self.gate.wait(WAIT_S)


class SteppedEncoder(GatedEncoder):
    """A :class:`GatedEncoder` that lets one call through per :meth:`step`."""

    def __init__(self, encoder: OnnxEncoder) -> None:
        super().__init__(encoder)
        self._steps = threading.Semaphore(0)

    def step(self) -> None:
        self._steps.release()

    def _wait(self) -> bool:
        return self._steps.acquire(timeout=WAIT_S)


async def until(condition: Callable[[], bool]) -> None:
    """Yield to the event loop until ``condition`` holds (a bound on steps, not on time)."""
    for _ in range(100_000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition never held")


def gated_batcher(gated: GatedEncoder, metrics: Metrics, **options: object) -> MicroBatcher:
    """A queue in front of ``gated``, tokenising with its encoder: no wait for a batch to fill,
    batches of 8 and a depth of 16 texts unless ``options`` say otherwise (any of
    :class:`MicroBatcher`'s keywords)."""
    values: dict = {"max_batch": 8, "max_wait_s": 0.0, "max_depth": 16, **options}
    return MicroBatcher(gated, metrics, tokenize=gated.encoder.token_ids, **values)
