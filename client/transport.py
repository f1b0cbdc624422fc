"""Running plans over HTTP: :class:`SyncTransport` on an :class:`httpx.Client`,
:class:`AsyncTransport` on an :class:`httpx.AsyncClient`.

Both send a plan's requests (several at once on threads, or gathered on the event loop), retry
429 and 503 as :class:`~client.retry.RetryPolicy` says, and hand every answer back to the plan.
A :class:`~client.plans.Fanout` runs its plans each at its own pace (on a thread pool, or as
tasks), with :class:`_Fanning` keeping the books for both.
Either can own its HTTP client (built from a base URL) or wrap one the caller owns, such as
FastAPI's ``TestClient``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Generic, Protocol, TypeVar

import httpx

from client.plans import Fanout, Plan, Request, Step
from client.retry import RetryPolicy

T = TypeVar("T")
DEFAULT_TIMEOUT_S = 300.0
"""A request's timeout: a batch of long texts on a loaded CPU service can take minutes."""
READY_POLL_S = 0.2


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class _Scoped:
    """What both transports keep besides their HTTP client: the default collection, the retry
    policy and what the service said about its limits."""

    def __init__(self, collection: str | None, retry: RetryPolicy | None) -> None:
        self.collection = collection
        """Documents go to, and searches run in, this collection (None: the default one)."""
        self.retry = retry or RetryPolicy()
        self.max_texts: int | None = None
        """The service's texts per request, read from ``/info`` when first needed."""


class _Started(Protocol):
    """A plan started by a fan-out: a thread's future, or an event loop's task."""

    def exception(self) -> BaseException | None: ...

    def result(self) -> Any: ...


F = TypeVar("F", bound=_Started)


class _Fanning(Generic[T, F]):
    """The books of a running :class:`~client.plans.Fanout`: which plan starts next, which
    are running, their results by position, and the first error (after which nothing starts)."""

    def __init__(self, fanout: Fanout[T]) -> None:
        self._source: Iterator[tuple[int, Plan[T]]] = iter(enumerate(fanout.plans))
        self._width = fanout.width
        self.running: dict[F, int] = {}
        self._finished: dict[int, T] = {}
        self._error: BaseException | None = None

    def fill(self, start: Callable[[Plan[T]], F]) -> bool:
        """Start plans with ``start`` until ``width`` run (none after an error); whether any
        is running."""
        while self._error is None and len(self.running) < self._width:
            try:
                entry = next(self._source, None)
            except Exception as error:  # the caller's iterable failed
                self._error = error
                break
            if entry is None:
                break
            self.running[start(entry[1])] = entry[0]
        return bool(self.running)

    def settle(self, done: Collection[F]) -> None:
        """Book the plans of ``done``: a result by its position, or the first error."""
        for future in done:
            position = self.running.pop(future)
            error = future.exception()
            if error is None:
                self._finished[position] = future.result()
            elif self._error is None:
                self._error = error

    def outcome(self) -> list[T]:
        """The results in order; the first error, raised, after one."""
        if self._error is not None:
            raise self._error
        return [self._finished[position] for position in sorted(self._finished)]


class SyncTransport(_Scoped):
    """Plans run to their end before the call returns."""

    def __init__(
        self,
        target: str | httpx.Client,
        *,
        api_key: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        collection: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(collection, retry)
        if isinstance(target, str):
            self.http = httpx.Client(base_url=target, timeout=timeout_s, headers=_headers(api_key))
            self._owned = True
        else:  # any client with httpx's API (Starlette's TestClient is one)
            self.http, self._owned = target, False
            self.http.headers.update(_headers(api_key))

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP client, if this transport built it."""
        if self._owned:
            self.http.close()

    def run(self, plan: Plan[T]) -> T:
        """Answer what ``plan`` asks for until it returns; its result. An error while
        answering is raised inside the plan."""
        try:
            step = next(plan)
            while True:
                try:
                    answer = self._answer(step)
                except BaseException as error:
                    step = plan.throw(error)
                else:
                    step = plan.send(answer)
        except StopIteration as done:
            return done.value

    def _answer(self, step: Step) -> list[Any]:
        if not isinstance(step, Fanout):
            return self._send_all(step)
        fanning: _Fanning[Any, Future[Any]] = _Fanning(step)
        pool = ThreadPoolExecutor(step.width)
        try:
            while fanning.fill(lambda plan: pool.submit(self.run, plan)):
                fanning.settle(wait(list(fanning.running), return_when=FIRST_COMPLETED).done)
        except BaseException:  # interrupted (Ctrl-C): no wait for the requests in flight
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
        return fanning.outcome()

    def _send_all(self, requests: list[Request]) -> list[httpx.Response]:
        if len(requests) <= 1:
            return [self._send(request) for request in requests]
        with ThreadPoolExecutor(len(requests)) as pool:
            return list(pool.map(self._send, requests))

    def _send(self, request: Request) -> httpx.Response:
        retried: dict[int, int] = {}
        while True:
            answer = self.http.request(
                request.method, request.path, params=request.params, json=request.json
            )
            wait = self.retry.wait_s(answer, retried, request.resendable)
            if wait is None:
                return answer
            time.sleep(wait)

    def is_ready(self) -> bool:
        """Whether ``GET /ready`` answers 200 now (a refused connection is a no)."""
        try:
            return self.http.get("/ready").status_code == 200
        except httpx.TransportError:
            return False

    def wait_ready(self, timeout_s: float) -> None:
        """Until ``/ready`` answers 200; :class:`TimeoutError` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not self.is_ready():
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no ready Fractal service at {self.http.base_url} after {timeout_s:.0f} s"
                )
            time.sleep(READY_POLL_S)


class AsyncTransport(_Scoped):
    """Plans run as coroutines: each call returns an awaitable."""

    def __init__(
        self,
        target: str | httpx.AsyncClient,
        *,
        api_key: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        collection: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(collection, retry)
        if isinstance(target, str):
            self.http = httpx.AsyncClient(
                base_url=target, timeout=timeout_s, headers=_headers(api_key)
            )
            self._owned = True
        else:
            self.http, self._owned = target, False
            self.http.headers.update(_headers(api_key))

    async def __aenter__(self: T) -> T:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client, if this transport built it."""
        if self._owned:
            await self.http.aclose()

    async def run(self, plan: Plan[T]) -> T:
        """Answer what ``plan`` asks for until it returns; its result. An error while
        answering is raised inside the plan."""
        try:
            step = next(plan)
            while True:
                try:
                    answer = await self._answer(step)
                except BaseException as error:
                    step = plan.throw(error)
                else:
                    step = plan.send(answer)
        except StopIteration as done:
            return done.value

    async def _answer(self, step: Step) -> list[Any]:
        if not isinstance(step, Fanout):
            return list(await asyncio.gather(*(self._send(request) for request in step)))
        fanning: _Fanning[Any, asyncio.Future[Any]] = _Fanning(step)
        try:
            while fanning.fill(lambda plan: asyncio.ensure_future(self.run(plan))):
                done, _ = await asyncio.wait(list(fanning.running), return_when=FIRST_COMPLETED)
                fanning.settle(done)
        except BaseException:  # cancelled: so are the plans it started, before it ends
            for task in fanning.running:
                task.cancel()
            await asyncio.gather(*fanning.running, return_exceptions=True)
            raise
        return fanning.outcome()

    async def _send(self, request: Request) -> httpx.Response:
        retried: dict[int, int] = {}
        while True:
            answer = await self.http.request(
                request.method, request.path, params=request.params, json=request.json
            )
            wait = self.retry.wait_s(answer, retried, request.resendable)
            if wait is None:
                return answer
            await asyncio.sleep(wait)

    async def is_ready(self) -> bool:
        """Whether ``GET /ready`` answers 200 now (a refused connection is a no)."""
        try:
            return (await self.http.get("/ready")).status_code == 200
        except httpx.TransportError:
            return False

    async def wait_ready(self, timeout_s: float) -> None:
        """Until ``/ready`` answers 200; :class:`TimeoutError` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not await self.is_ready():
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no ready Fractal service at {self.http.base_url} after {timeout_s:.0f} s"
                )
            await asyncio.sleep(READY_POLL_S)
