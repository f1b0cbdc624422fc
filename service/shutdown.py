"""Graceful shutdown on SIGTERM, within ``FRACTAL_SHUTDOWN_GRACE_S``.

uvicorn by itself, on SIGTERM, closes its listening socket at once (a new connection is
refused), closes idle keep-alive connections, waits for the requests in flight (at most
``timeout_graceful_shutdown``, then cancels them), runs the app's shutdown and re-raises the
signal (exit status -15). :class:`GracefulServer` puts a drain in front of that:

1. on the first SIGTERM the runtime starts draining (:meth:`Runtime.drain
   <service.runtime.Runtime.drain>`): a request that arrives from then on, on a new or a
   keep-alive connection, is answered 503 ``not_ready`` with ``Connection: close`` by
   :class:`DrainGate` (``/ready`` and ``/health`` included; the body is not read), while the
   listener stays open; a request that arrived before, even one whose body is still on its
   way, is served as usual;
2. once the requests that were in flight at the signal have finished (or the grace is spent),
   uvicorn's own shutdown runs with what is left of the grace as its
   ``timeout_graceful_shutdown``: from then on a new connection is refused, an idle keep-alive
   one is closed (a request racing that close sees the connection end without an answer), and
   requests still running when the grace ends are cancelled (answered 503 by
   :class:`DrainGate` if no answer had begun, their connection closed otherwise);
3. the app's shutdown snapshots the indexes and closes the stores (:meth:`Runtime.stop
   <service.runtime.Runtime.stop>`), after the grace if the requests took all of it; the process
   exits with status 0.

A second SIGTERM, or SIGINT, is uvicorn's own: shut down now, without the drain.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import Callable
from types import FrameType

import uvicorn
from fastapi import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import ShuttingDown, error_response

logger = logging.getLogger("service")


class DrainGate:
    """ASGI middleware: while the app's runtime drains, a request is answered 503 at once; one
    that uvicorn cancels when the grace ends is answered 503 too, if no answer had begun."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        runtime = scope["app"].state.runtime if scope["type"] == "http" else None
        if runtime is None:
            await self.app(scope, receive, send)
            return
        if runtime.draining:
            await self._refuse(scope, receive, send, "takes no new requests; retry")
            return
        answered = False

        async def send_noting(message: Message) -> None:
            nonlocal answered
            answered = True
            await send(message)

        try:
            await self.app(scope, receive, send_noting)
        except asyncio.CancelledError:
            if answered or not runtime.draining:
                raise
            # The grace ended (uvicorn cancels what still runs): answer in the error shape
            # rather than uvicorn's plain-text 500, and end the request here.
            await self._refuse(
                scope,
                receive,
                send,
                "stopped before this request finished; it may or may not "
                "have taken effect (a write is stored whole or not at all)",
            )

    @staticmethod
    async def _refuse(scope: Scope, receive: Receive, send: Send, why: str) -> None:
        refusal = ShuttingDown(f"the service is shutting down and {why}")
        response = error_response(
            Request(scope), refusal.status, refusal.kind, refusal.message, None, refusal.headers()
        )
        await response(scope, receive, send)


class GracefulServer(uvicorn.Server):
    """uvicorn's server with the drain of the module docstring; ``on_drain`` starts refusing
    requests."""

    def __init__(self, config: uvicorn.Config, grace_s: float, on_drain: Callable[[], None]):
        super().__init__(config)
        self.grace_s = grace_s
        self._on_drain = on_drain
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain: asyncio.Task | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Called in the signal handler: schedule the drain on the event loop."""
        if sig != signal.SIGTERM or self._draining or self._loop is None:
            super().handle_exit(sig, frame)
            return
        self._loop.call_soon_threadsafe(self._start_drain)

    @property
    def _draining(self) -> bool:
        return self._drain is not None

    def _start_drain(self) -> None:
        if not self._draining:
            self._drain = asyncio.ensure_future(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.grace_s
        in_flight = set(self.server_state.tasks)
        self._on_drain()
        logger.info(
            "SIGTERM: refusing new requests, finishing %d in flight (at most %.0f s)",
            len(in_flight),
            self.grace_s,
        )
        if in_flight:
            await asyncio.wait(in_flight, timeout=self.grace_s)
        # uvicorn waits on it with asyncio, which takes a float (its annotation says int).
        self.config.timeout_graceful_shutdown = max(0.0, deadline - loop.time())  # type: ignore[assignment]
        self.should_exit = True


def serve(config: uvicorn.Config, grace_s: float, on_drain: Callable[[], None]) -> None:
    """Run the server until a signal has shut it down (see the module docstring)."""
    GracefulServer(config, grace_s, on_drain).run()
