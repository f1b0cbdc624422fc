"""Who may call the service and how much they may send: API keys, body size limit and CORS.

Two ASGI middlewares, in front of every route, apply in order (the app puts admission control,
:mod:`service.admission`, between them, so that a shed request's body is never read):

1. **CORS** (Starlette's ``CORSMiddleware``) with the ``FRACTAL_CORS_ORIGINS`` allow-list, so a
   browser's preflight is answered without a key and a 401 still carries the CORS headers;
2. **API keys**: when ``FRACTAL_API_KEYS`` lists any or ``FRACTAL_API_KEYS_FILE`` is set,
   every request needs ``Authorization: Bearer <key>`` (401 otherwise), except the routes
   declared public (:func:`service.routes.public_when`, :func:`service.route_kinds.public_paths`)
   while their setting is true: ``/health`` and ``/ready`` with ``FRACTAL_PUBLIC_HEALTH``,
   ``/metrics`` with ``FRACTAL_PUBLIC_METRICS``. The key's grant (:mod:`service.access`: its
   scope and collections) is bound to the request; the runtime checks it (403).
   Keys are compared as SHA-256 digests with :func:`hmac.compare_digest`, against every key
   each time, so the time taken says nothing about how much of a key was right;
3. **body size** (:class:`BodyLimitMiddleware`): a body over ``FRACTAL_MAX_BODY_BYTES`` is
   refused with 413 as soon as its ``Content-Length`` or the bytes received so far exceed the
   limit, before any parsing.

Keys are ``SecretStr`` in the settings and appear in no log and no answer. What these checks
mean for the OpenAPI document is written by :mod:`service.openapi`.
"""

from __future__ import annotations

import hashlib
import hmac
from itertools import chain

from fastapi import Request
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.access import EVERYTHING, Grant, KeyFile, bound
from service.errors import error_response
from service.route_kinds import public_paths
from service.settings import Settings

CORS_METHODS = ("GET", "POST", "DELETE")
CORS_HEADERS = ("authorization", "content-type")
SCHEME = "apiKey"
UNAUTHORIZED = "missing or invalid API key: send the header 'Authorization: Bearer <key>'"


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def bearer_token(scope: Scope) -> str | None:
    """The token of an ``Authorization: Bearer …`` header, if the request has one."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


class _Guard:
    """Step 2 of the module docstring, for one settings object."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.full_keys = [
            (_digest(key.get_secret_value()), EVERYTHING) for key in settings.api_keys
        ]
        self.key_file = None if settings.api_keys_file is None else KeyFile(settings.api_keys_file)
        self._file_keys: dict[str, Grant] | None = None
        self._file_digests: list[tuple[bytes, Grant]] = []
        self.public_paths = public_paths(settings)
        self.locked = settings.requires_keys

    def _scoped_digests(self) -> list[tuple[bytes, Grant]]:
        """The scoped keys file's keys as digests, hashed again only when the file changed."""
        if self.key_file is None:
            return []
        keys = self.key_file.keys()
        if keys is not self._file_keys:
            self._file_keys = keys
            self._file_digests = [(_digest(key), grant) for key, grant in keys.items()]
        return self._file_digests

    def grant(self, scope: Scope) -> Grant | None:
        """What the request may do: :data:`service.access.EVERYTHING` when no key is needed,
        its key's grant, or None (401)."""
        if not self.locked or scope["path"] in self.public_paths:
            return EVERYTHING
        token = bearer_token(scope)
        if token is None:
            return None
        presented = _digest(token)
        found: Grant | None = None
        for digest, grant in chain(self.full_keys, self._scoped_digests()):
            if hmac.compare_digest(presented, digest):
                found = grant
        return found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        grant = self.grant(scope)
        if grant is None:
            headers = {"WWW-Authenticate": "Bearer"}
            await error_response(
                Request(scope), 401, "unauthorized", UNAUTHORIZED, headers=headers
            )(scope, receive, send)
            return
        with bound(grant):
            await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """Step 3 of the module docstring, with the app's ``FRACTAL_MAX_BODY_BYTES``: reads the
    whole body (refusing it once over the limit) and hands it on in one message."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        max_body_bytes = scope["app"].state.settings.max_body_bytes

        def too_large(size: int) -> str | None:
            if size <= max_body_bytes:
                return None
            return f"the request body is larger than the limit of {max_body_bytes} bytes"

        request = Request(scope)
        declared = request.headers.get("content-length", "")
        problem = too_large(int(declared)) if declared.isdigit() else None
        chunks: list[bytes] = []
        size = 0
        while problem is None:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            chunks.append(chunk)
            problem = too_large(size)
            if not message.get("more_body", False):
                break
        if problem is not None:
            await error_response(request, 413, "payload_too_large", problem)(scope, receive, send)
            return
        body: list[Message] = [{"type": "http.request", "body": b"".join(chunks)}]

        async def replay() -> Message:
            return body.pop() if body else await receive()

        await self.app(scope, replay, send)


class SecurityMiddleware:
    """Steps 1 and 2 of the module docstring, with the settings the app was started with.

    The settings are read from ``app.state.settings`` on each request (the app may load them
    only when it starts); until there are some, every request gets 503.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._settings: Settings | None = None
        self._stack: ASGIApp = app

    def _stack_for(self, settings: Settings) -> ASGIApp:
        if settings is not self._settings:
            guard = _Guard(self.app, settings)
            # Without allowed origins CORS only adds work to every request: left out.
            self._stack = (
                CORSMiddleware(
                    guard,
                    allow_origins=settings.cors_origins,
                    allow_methods=CORS_METHODS,
                    allow_headers=CORS_HEADERS,
                )
                if settings.cors_origins
                else guard
            )
            self._settings = settings
        return self._stack

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        settings: Settings | None = scope["app"].state.settings
        if settings is None:
            message = "the service is not ready: its settings are not loaded"
            response = error_response(Request(scope), 503, "not_ready", message)
            await response(scope, receive, send)
            return
        await self._stack_for(settings)(scope, receive, send)
