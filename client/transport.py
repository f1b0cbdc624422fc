"""Running plans over HTTP: :class:`SyncTransport` on an :class:`httpx.Client`,
:class:`AsyncTransport` on an :class:`httpx.AsyncClient`.

Both send a plan's requests (several at once on threads, or gathered on the event loop), retry
429 and 503 as :class:`~client.retry.RetryPolicy` says, and hand every answer back to the plan.
Either can own its HTTP client (built from a base URL) or wrap one the caller owns, such as
FastAPI's ``TestClient``.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import httpx

from client.plans import Plan, Request
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
        """Send what ``plan`` asks for until it returns; its result."""
        try:
            requests = next(plan)
            while True:
                requests = plan.send(self._send_all(requests))
        except StopIteration as done:
            return done.value

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
        """Send what ``plan`` asks for until it returns; its result."""
        try:
            requests = next(plan)
            while True:
                answers = await asyncio.gather(*(self._send(request) for request in requests))
                requests = plan.send(list(answers))
        except StopIteration as done:
            return done.value

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
