"""Admission control: work the service cannot do in time is refused before it costs anything,
and work nobody waits for any more is dropped.

:class:`AdmissionMiddleware` is a pure ASGI middleware that sits after the API key check and
before the body is read (:mod:`service.security`). It looks only at the requests that encode
texts (:func:`encodes`: the routes declared so, :mod:`service.route_kinds`), and for each one
does, in order:

1. **concurrency**: with ``FRACTAL_LIMIT_CONCURRENCY`` set, a request that finds that many
   encoding requests in progress gets 429;
2. **shedding**: when the encoder queue is full, or its estimated wait is over
   ``FRACTAL_QUEUE_DEADLINE_MS`` (:meth:`service.batching.MicroBatcher.admit`), the request
   gets 429 with a ``Retry-After`` from that estimate at once, from its method and path alone:
   no body read, no JSON parsed;
3. **deadline**: the request is bound as the queue's caller (:data:`service.batching.CALLER`),
   so ``FRACTAL_REQUEST_TIMEOUT_MS`` counts from its arrival here;
4. **disconnect**: once the app has read the body, a watcher waits for the client to
   disconnect; if it does before the answer starts, the request's wait for the encoder fails
   (:meth:`service.batching.Caller.leave`): its texts still queued are dropped, unencoded, and
   the request ends at once (status 499 in the metrics). Nothing else of it is interrupted: a
   store write that has begun completes.

Refusals are answered in the one error shape and counted in ``fractal_requests_shed_total``.
"""

from __future__ import annotations

import asyncio

from fastapi import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.batching import CALLER, Caller
from service.errors import Overloaded, error_response
from service.route_kinds import is_encoding
from service.runtime import Runtime
from service.settings import Settings

CONCURRENCY_RETRY_AFTER_S = 1


def encodes(scope: Scope) -> bool:
    """Whether an HTTP request goes to a route declared to encode texts
    (:func:`service.routes.encodes_texts`): ``POST /embed``, ``/v1/embeddings``, ``/documents``
    (of any collection), ``/search``, and ``GET /search``."""
    return is_encoding(scope["method"], scope["path"])


class AdmissionMiddleware:
    """The steps of the module docstring, for one app (its settings and runtime are read from
    ``app.state`` on each request; without a runtime, the routes answer 503 themselves)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.in_progress = 0
        """Encoding requests admitted and not yet answered."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not encodes(scope):
            await self.app(scope, receive, send)
            return
        caller = Caller()
        try:
            self._admit(scope)
        except Overloaded as refused:
            response = error_response(
                Request(scope),
                refused.status,
                refused.kind,
                refused.message,
                None,
                refused.headers(),
            )
            await response(scope, receive, send)
            return
        self.in_progress += 1
        token = CALLER.set(caller)
        try:
            await self._watched(caller, scope, receive, send)
        finally:
            CALLER.reset(token)
            self.in_progress -= 1

    def _admit(self, scope: Scope) -> None:
        """Raise :class:`Overloaded` for a request to refuse (steps 1 and 2)."""
        app_state = scope["app"].state
        settings: Settings = app_state.settings
        limit = settings.limit_concurrency
        if limit and self.in_progress >= limit:
            app_state.metrics.requests_shed.labels(reason="concurrency").inc()
            raise Overloaded(
                f"{self.in_progress} encoding requests are in progress, the limit "
                "(FRACTAL_LIMIT_CONCURRENCY); retry later",
                CONCURRENCY_RETRY_AFTER_S,
            )
        runtime: Runtime | None = app_state.runtime
        if runtime is not None and runtime.ready:
            runtime.batcher.admit()

    async def _watched(self, caller: Caller, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app; tell ``caller`` if the client disconnects after sending the body and
        before the answer starts (step 4). The app's own calls to ``receive`` after the body
        wait for the watcher's disconnect, so that only one caller ever waits on the server's."""
        body_read = asyncio.Event()
        disconnected = asyncio.Event()
        answering = False

        async def receive_body() -> Message:
            if body_read.is_set():
                await disconnected.wait()
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_read.set()
            return message

        async def send_answer(message: Message) -> None:
            nonlocal answering
            answering = True
            await send(message)

        async def watch() -> None:
            await body_read.wait()
            await receive()  # the server's: a disconnect, or the end of the answer
            disconnected.set()
            if not answering:
                caller.leave()

        watcher = asyncio.get_running_loop().create_task(watch())
        try:
            await self.app(scope, receive_body, send_answer)
        finally:
            watcher.cancel()
