"""The asynchronous micro-batching queue in front of the encoder.

Requests put their texts (or token ids: :data:`service.encoder.EncoderInput`) in one queue and
await a future. A single worker task takes up to ``max_batch`` texts at a time, across requests,
once the batch is full or its oldest text has waited ``max_wait`` seconds, and runs the encoder
in a dedicated thread, so the event loop never blocks on inference. While a batch runs, the
next one fills. The queue holds at most ``max_depth`` texts; a request that does not fit is
refused at once with :class:`Overloaded` (HTTP 429) and a ``Retry-After`` estimated from recent
batch times.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from service.encoder import Encoded, EncoderInput
from service.errors import NotReady, Overloaded
from service.metrics import Metrics

SMOOTHING = 0.2
"""Weight of the newest batch in the running mean of batch durations."""


@dataclass(eq=False)
class _Ticket:
    """One request: its future and the rows filled in so far."""

    future: asyncio.Future[Encoded]
    vectors: list[np.ndarray | None]
    tokens: list[int]
    remaining: int


@dataclass(eq=False)
class _Item:
    ticket: _Ticket
    position: int
    content: EncoderInput
    enqueued: float = field(default_factory=time.monotonic)


class MicroBatcher:
    """Batches texts from concurrent requests into encoder calls; see the module docstring."""

    def __init__(
        self,
        encode: Callable[[list[EncoderInput]], Encoded],
        metrics: Metrics,
        max_batch: int,
        max_wait_s: float,
        max_depth: int,
    ) -> None:
        self._encode = encode
        self._metrics = metrics
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.max_depth = max_depth
        self._items: deque[_Item] = deque()
        self._arrived = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="encoder")
        self._worker: asyncio.Task | None = None
        self._in_flight: list[_Item] = []
        self._batch_seconds = 0.0

    @property
    def depth(self) -> int:
        """Texts waiting (not counting the batch being encoded)."""
        return len(self._items)

    @property
    def running(self) -> bool:
        return self._worker is not None and not self._worker.done()

    def start(self) -> None:
        """Start the worker task on the running event loop."""
        self._worker = asyncio.get_running_loop().create_task(self._run(), name="micro-batcher")

    async def stop(self) -> None:
        """Stop the worker; requests still waiting or in the batch being encoded fail with
        :class:`NotReady`. Waits (off the event loop) for the encoder thread to finish."""
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
            self._worker = None
        for item in [*self._in_flight, *self._items]:
            if not item.ticket.future.done():
                item.ticket.future.set_exception(NotReady("the service is shutting down"))
        self._in_flight, self._items = [], deque()
        self._metrics.queue_depth.set(0)
        await asyncio.to_thread(self._executor.shutdown, wait=True)

    def retry_after_s(self) -> int:
        """Whole seconds until the queue has likely drained (at least 1)."""
        batches = math.ceil(len(self._items) / self.max_batch) + 1
        return max(1, math.ceil(batches * (self._batch_seconds + self.max_wait_s)))

    async def embed(self, texts: Sequence[EncoderInput]) -> Encoded:
        """Full embeddings and token counts of ``texts`` (or token ids), in order."""
        if not self.running:
            raise NotReady("the encoder is not running")
        if len(self._items) + len(texts) > self.max_depth:
            raise Overloaded(
                f"the encoder queue is full ({len(self._items)} of {self.max_depth} texts "
                "waiting); retry later",
                self.retry_after_s(),
            )
        future: asyncio.Future[Encoded] = asyncio.get_running_loop().create_future()
        ticket = _Ticket(future, [None] * len(texts), [0] * len(texts), len(texts))
        self._items.extend(_Item(ticket, position, text) for position, text in enumerate(texts))
        self._metrics.queue_depth.set(len(self._items))
        self._arrived.set()
        return await future

    async def _next_batch(self) -> list[_Item]:
        """Wait for texts, then until the batch is full or its oldest text is due."""
        while not self._items:
            self._arrived.clear()
            await self._arrived.wait()
        deadline = self._items[0].enqueued + self.max_wait_s
        while len(self._items) < self.max_batch and (remaining := deadline - time.monotonic()) > 0:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except asyncio.TimeoutError:
                break
        batch = []
        while self._items and len(batch) < self.max_batch:
            item = self._items.popleft()
            if not item.ticket.future.done():  # its request was cancelled or failed
                batch.append(item)
        self._metrics.queue_depth.set(len(self._items))
        return batch

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._next_batch()
            if not batch:
                continue
            self._in_flight = batch
            started = time.monotonic()
            for item in batch:
                self._metrics.queue_wait_seconds.observe(started - item.enqueued)
            self._metrics.encode_batch_size.observe(len(batch))
            try:
                encoded = await loop.run_in_executor(
                    self._executor, self._encode, [item.content for item in batch]
                )
            except Exception as exc:  # the encoder failed: fail these requests, keep serving
                for item in batch:
                    if not item.ticket.future.done():
                        item.ticket.future.set_exception(exc)
                continue
            elapsed = time.monotonic() - started
            self._metrics.encode_seconds.observe(elapsed)
            self._batch_seconds += SMOOTHING * (elapsed - self._batch_seconds)
            for row, item in enumerate(batch):
                self._deliver(item, encoded.vectors[row], int(encoded.tokens[row]))
            self._in_flight = []

    @staticmethod
    def _deliver(item: _Item, vector: np.ndarray, tokens: int) -> None:
        ticket = item.ticket
        ticket.vectors[item.position] = vector
        ticket.tokens[item.position] = tokens
        ticket.remaining -= 1
        if ticket.remaining == 0 and not ticket.future.done():
            ticket.future.set_result(
                Encoded(np.stack(ticket.vectors), np.array(ticket.tokens, dtype=np.int64))
            )
