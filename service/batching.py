"""The asynchronous micro-batching queue in front of the encoder.

Requests put their texts (or token ids: :data:`encoding.encoder.EncoderInput`) in one queue,
tokenised, and await a future. A single worker task takes a batch of up to ``max_batch`` texts
at a time, across requests, once ``max_batch`` texts are queued or the oldest has waited
``max_wait`` seconds, and runs the encoder on their token ids in a dedicated thread, so the event
loop never blocks on inference (that thread runs ``nice`` values lower, like the encoder's own:
:mod:`encoding.priority`). While a batch runs, the next one fills.

Which texts make a batch is the ``policy``:

- ``length`` (default): the oldest queued text, always (so none waits for more batches than
  there are texts ahead of it), and, of the ``window`` oldest, the texts closest to it in token
  count, while the batch stays within ``batch_tokens`` padded tokens
  (:func:`encoding.length_batches.nearest_batch`). Short texts are not padded to long ones, and a
  long text does not make a batch of short ones slow;
- ``fifo``: the ``max_batch`` oldest texts, whatever their lengths (the encoder still cuts a
  batch over its budget into sub-batches).

Priority: texts come in two lanes. **Queries** (a search's query, ``/embed``,
``/v1/embeddings``) are served before **bulk** texts (documents being stored, ``POST
/documents``): a batch is taken from the query lane whenever it holds a text, and from the bulk
lane otherwise, or when no bulk batch has run for :data:`BULK_TURN_S` (so that ingest keeps
moving, at one batch per turn, under a stream of queries). A batch never mixes the lanes: a query
does not wait behind long documents in its own batch.

Admission: the queue holds at most ``max_depth`` texts, and measures what a batch costs (a
fixed part per batch and a part per text, :mod:`service.batch_cost`), so that the queue's wait
is priced as the batches it will take. :meth:`MicroBatcher.admit` refuses a new request
with :class:`Overloaded` (HTTP 429, with a ``Retry-After`` from the estimated wait) when the
queue is full or its estimated wait is over ``queue_deadline_s``; a query counts only the
query lane and the batch being encoded, bulk texts count everything queued. :mod:`service.admission`
asks it (as for a query) before the request's body is read. A request whose texts are still queued
``timeout_s`` after it arrived fails with :class:`DeadlineExceeded`, and one whose client
disconnects (:meth:`Caller.leave`) with :class:`ClientDisconnected`; a cancelled one leaves:
either way its queued texts are skipped, never encoded, and no longer count in the depth or the
estimate.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal, cast

import numpy as np

from encoding import TokenIds
from encoding.encoder import Encoded, EncoderInput
from encoding.length_batches import DEFAULT_BATCH_TOKENS, DEFAULT_BATCH_WINDOW, nearest_batch
from encoding.priority import lower_thread_priority
from service.batch_cost import BatchCost
from service.errors import ClientDisconnected, DeadlineExceeded, NotReady, Overloaded
from service.metrics import Metrics

INLINE_TOKENISE_TEXTS = 8
INLINE_TOKENISE_CHARS = 1024
"""Requests of at most :data:`INLINE_TOKENISE_TEXTS` texts and this many characters are
tokenised on the event loop, larger ones in a thread. On the 2 shared cores the benchmarks run
on, MiniLM's tokenizer takes 5 µs plus 0.2 µs a character for one text, and about 40 µs plus
7 µs a text plus 0.25 µs a character for several, while a hop to a thread and back costs about
75 µs: a query or a few short texts (most requests) is cheaper inline, and the loop stalls for at
most about 0.35 ms on one; 128 texts of 50 characters (2 ms) or of 8,192 (0.4 s) go to a
thread."""

BULK_TURN_S = 0.5
"""While queries are waiting, bulk texts still get one batch when none has run for this long."""

BatchPolicy = Literal["length", "fifo"]
"""How the queue makes a batch; see the module docstring."""


@dataclass(eq=False)
class Caller:
    """The HTTP request being served, as :mod:`service.admission` binds it (:data:`CALLER`):
    when it arrived (its deadline counts from then, not from when its texts were queued), and
    the encoder wait it is in, if any."""

    arrived: float = field(default_factory=time.monotonic)
    gone: bool = False
    waiting: asyncio.Future[Encoded] | None = None

    def leave(self) -> None:
        """The client disconnected: fail the wait it is in, and any it would start."""
        self.gone = True
        if self.waiting is not None and not self.waiting.done():
            self.waiting.set_exception(_disconnected())


CALLER: ContextVar[Caller | None] = ContextVar("caller", default=None)
"""The request whose texts :meth:`MicroBatcher.embed` queues; None outside HTTP requests (its
deadline then counts from the call)."""


def _disconnected() -> ClientDisconnected:
    return ClientDisconnected("the client disconnected while its texts waited for the encoder")


@dataclass(eq=False)
class _Ticket:
    """One request: its future, the rows filled in so far, how many of its texts are still
    queued (0 once the request is gone) and its deadline (``time.monotonic()``; None: none)."""

    future: asyncio.Future[Encoded]
    vectors: list[np.ndarray | None]
    tokens: list[int]
    remaining: int
    queued: int
    deadline: float | None
    bulk: bool = False


@dataclass(eq=False)
class _Item:
    """One queued text: its request, its position there, and its token ids."""

    ticket: _Ticket
    position: int
    token_ids: TokenIds
    enqueued: float = field(default_factory=time.monotonic)

    @property
    def length(self) -> int:
        return len(self.token_ids)


class MicroBatcher:
    """Batches texts from concurrent requests into encoder calls; see the module docstring.

    ``tokenize`` makes the token ids of a request's inputs (token ids as given) when it is
    queued (:meth:`encoding.encoder.OnnxEncoder.token_ids`); ``encode`` gets a batch of them.
    """

    def __init__(
        self,
        encode: Callable[[list[TokenIds]], Encoded],
        metrics: Metrics,
        max_batch: int,
        max_wait_s: float,
        max_depth: int,
        queue_deadline_s: float = 0.0,
        timeout_s: float = 0.0,
        *,
        tokenize: Callable[[Sequence[EncoderInput]], list[TokenIds]],
        policy: BatchPolicy = "length",
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        window: int = DEFAULT_BATCH_WINDOW,
        nice: int = 0,
    ) -> None:
        if policy == "length" and window < max_batch:
            raise ValueError(f"window ({window}) must be at least max_batch ({max_batch})")
        self._encode = encode
        self._tokenize = tokenize
        self._metrics = metrics
        self.policy = policy
        self.batch_tokens = batch_tokens
        self.window = window if policy == "length" else max_batch
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.max_depth = max_depth
        self.queue_deadline_s = queue_deadline_s
        self.timeout_s = timeout_s
        self._lanes: dict[bool, deque[_Item]] = {False: deque(), True: deque()}
        """The query lane (``False``) and the bulk lane (``True``)."""
        self._queued = 0
        self._queued_bulk = 0
        self._last_bulk = time.monotonic()
        self._arrived = asyncio.Event()
        self._executor = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="encoder",
            initializer=lower_thread_priority,
            initargs=(nice,),
        )
        self._worker: asyncio.Task | None = None
        self._in_flight: list[_Item] = []
        self._cost = BatchCost()

    @property
    def depth(self) -> int:
        """Texts waiting for requests still waiting for them (not counting the batch being
        encoded)."""
        return self._queued

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
        for item in [*self._in_flight, *self._lanes[False], *self._lanes[True]]:
            if not item.ticket.future.done():
                item.ticket.future.set_exception(NotReady("the service is shutting down"))
        self._in_flight = []
        self._lanes = {False: deque(), True: deque()}
        await asyncio.to_thread(self._executor.shutdown, wait=True)

    def _ahead(self, bulk: bool) -> int:
        """Texts queued ahead of a new one of that lane: for a query, the query lane's."""
        return self._queued if bulk else self._queued - self._queued_bulk

    def estimated_wait_s(self, bulk: bool = False) -> float | None:
        """Seconds until the texts ahead of a new text of that lane (and the batch being
        encoded) are likely done, in batches of up to ``max_batch`` at the measured cost of a
        batch; None before any batch was measured. (``max_wait`` is left out: a queue that has
        a backlog fills its batches at once.)"""
        return self._cost.wait_s(self._ahead(bulk), len(self._in_flight), self.max_batch)

    def retry_after_s(self, bulk: bool = False) -> int:
        """Whole seconds until the texts ahead of a new one of that lane have likely been
        encoded (at least 1)."""
        return max(1, math.ceil(self.estimated_wait_s(bulk) or 0.0))

    def admit(self, texts: int = 1, bulk: bool = False) -> None:
        """Raise :class:`Overloaded` (and count the request as shed) if ``texts`` more texts
        of that lane do not fit in the queue, or if their estimated wait is over
        ``queue_deadline_s`` (when set and once measured). Cheap: two comparisons."""
        ahead = self._ahead(bulk)
        if ahead + texts > self.max_depth:
            self._refuse(
                "queue_full",
                f"the encoder queue is full ({ahead} of {self.max_depth} texts "
                "waiting); retry later",
                bulk,
            )
        wait = self.estimated_wait_s(bulk)
        if self.queue_deadline_s and wait is not None and wait > self.queue_deadline_s:
            self._refuse(
                "queue_wait",
                f"the encoder queue's estimated wait is {wait * 1000:.0f} ms, over the limit "
                f"of {self.queue_deadline_s * 1000:.0f} ms; retry later",
                bulk,
            )

    def _refuse(self, reason: str, message: str, bulk: bool) -> None:
        self._metrics.requests_shed.labels(reason=reason).inc()
        raise Overloaded(message, self.retry_after_s(bulk))

    async def embed(self, texts: Sequence[EncoderInput], bulk: bool = False) -> Encoded:
        """Full embeddings and token counts of ``texts`` (or token ids), in order; ``bulk``:
        documents being stored, served after queries (see the module docstring)."""
        caller = CALLER.get() or Caller()
        count = len(texts)
        self._check_queueable(caller, count, bulk)
        characters = sum(len(text) for text in texts if isinstance(text, str))
        if count > INLINE_TOKENISE_TEXTS or characters > INLINE_TOKENISE_CHARS:
            token_ids = await asyncio.to_thread(self._tokenize, texts)
            # the queue, and the caller, moved on meanwhile
            self._check_queueable(caller, count, bulk)
        else:
            token_ids = self._tokenize(texts)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Encoded] = loop.create_future()
        deadline = caller.arrived + self.timeout_s if self.timeout_s else None
        ticket = _Ticket(future, [None] * count, [0] * count, count, count, deadline, bulk)
        self._lanes[bulk].extend(
            _Item(ticket, position, ids) for position, ids in enumerate(token_ids)
        )
        self._queued += count
        self._queued_bulk += count if bulk else 0
        self._metrics.queue_depth.set(self._queued)
        self._arrived.set()
        timer = None
        if deadline is not None:
            timer = loop.call_later(deadline - time.monotonic(), self._expire, ticket)
        caller.waiting = future
        try:
            return await future
        finally:
            caller.waiting = None
            if timer is not None:
                timer.cancel()
            self._forget(ticket)

    def _check_queueable(self, caller: Caller, texts: int, bulk: bool) -> None:
        """Raise unless ``texts`` more texts of ``caller`` can be queued now in that lane."""
        if not self.running:
            raise NotReady("the encoder is not running")
        if caller.gone:
            raise _disconnected()
        self.admit(texts, bulk)

    def _expire(self, ticket: _Ticket) -> None:
        """Fail a request whose deadline passed while texts of it were still queued."""
        if ticket.queued and not ticket.future.done():
            self._metrics.requests_shed.labels(reason="deadline").inc()
            ticket.future.set_exception(
                DeadlineExceeded(
                    f"the texts were still queued for the encoder {self.timeout_s * 1000:.0f} ms "
                    "after the request arrived; retry later"
                )
            )

    def _forget(self, ticket: _Ticket) -> None:
        """The request is answered or gone: its texts still queued no longer count (the worker
        skips them)."""
        future = ticket.future
        left = future.cancelled() or isinstance(future.exception(), ClientDisconnected)
        if ticket.queued and left:
            self._metrics.requests_shed.labels(reason="disconnected").inc()
        self._queued -= ticket.queued
        if ticket.bulk:
            self._queued_bulk -= ticket.queued
        ticket.queued = 0
        self._metrics.queue_depth.set(self._queued)

    def _live_head(self, lane: deque[_Item]) -> bool:
        """Drop the items at the front of ``lane`` whose request is gone or past its
        deadline; whether a live one is left."""
        now = time.monotonic()
        while lane:
            ticket = lane[0].ticket
            if ticket.deadline is not None and ticket.deadline <= now:
                self._expire(ticket)
            if not ticket.future.done():
                return True
            lane.popleft()
        return False

    def _next_lane(self) -> bool | None:
        """The lane the next batch comes from (``True``: bulk), or None when both are empty."""
        queries, bulk = self._live_head(self._lanes[False]), self._live_head(self._lanes[True])
        if bulk and (not queries or time.monotonic() - self._last_bulk >= BULK_TURN_S):
            return True
        return False if queries else None

    async def _next_batch(self) -> list[_Item]:
        """Wait for texts, then until ``max_batch`` of the lane they are in are queued or the
        oldest is due; then take a batch of the lane served next by the policy (empty if every
        text left meanwhile)."""
        while (bulk := self._next_lane()) is None:
            self._arrived.clear()
            await self._arrived.wait()
        due = self._lanes[bulk][0].enqueued + self.max_wait_s
        while self._lane_depth(bulk) < self.max_batch and (remaining := due - time.monotonic()) > 0:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except asyncio.TimeoutError:
                break
        bulk = self._next_lane()  # a query may have come while bulk texts were gathered
        if bulk is None:
            return []
        lane = self._lanes[bulk]
        window: list[_Item] = []
        while len(window) < self.window and self._live_head(lane):
            window.append(lane.popleft())
        chosen = set(self._choose([item.length for item in window])) if window else set()
        batch = [item for position, item in enumerate(window) if position in chosen]
        left = [item for position, item in enumerate(window) if position not in chosen]
        lane.extendleft(reversed(left))
        for item in batch:
            item.ticket.queued -= 1
        self._queued -= len(batch)
        if bulk:
            self._queued_bulk -= len(batch)
            self._last_bulk = time.monotonic()
        self._metrics.queue_depth.set(self._queued)
        return batch

    def _lane_depth(self, bulk: bool) -> int:
        return self._queued_bulk if bulk else self._queued - self._queued_bulk

    def _choose(self, lengths: list[int]) -> list[int]:
        """Positions in the window (token counts ``lengths``, oldest first) of the batch."""
        if self.policy == "fifo":
            return list(range(len(lengths)))  # the window is the max_batch oldest
        return nearest_batch(lengths, self.max_batch, self.batch_tokens)

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
                    self._executor, self._encode, [item.token_ids for item in batch]
                )
            except Exception as exc:  # the encoder failed: fail these requests, keep serving
                for item in batch:
                    if not item.ticket.future.done():
                        item.ticket.future.set_exception(exc)
                self._in_flight = []
                continue
            elapsed = time.monotonic() - started
            self._metrics.encode_seconds.observe(elapsed)
            self._cost.observe(len(batch), elapsed)
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
                Encoded(
                    np.stack(cast(list[np.ndarray], ticket.vectors)),  # every one delivered now
                    np.array(ticket.tokens, dtype=np.int64),
                )
            )
