"""One client of a Milvus server, shared by every collection of a service: every call with a
deadline, and a failure turned into the backend's errors."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

from index.backend import BackendUnavailable, CollectionMissing

if TYPE_CHECKING:
    from pymilvus import MilvusClient

logger = logging.getLogger("index.milvus")

HEALTH_TTL_S = 1.0
"""How long a health check's answer is reused (``/ready`` may be polled often)."""
RECONNECT_BACKOFF_MS = 1_000
RECONNECT_OPTIONS = {
    "grpc.initial_reconnect_backoff_ms": RECONNECT_BACKOFF_MS,
    "grpc.max_reconnect_backoff_ms": RECONNECT_BACKOFF_MS,
}
"""gRPC channel options: a lost server is tried again every second. gRPC's own backoff grows
to two minutes (pymilvus shares one channel per server, so a new client waits it out too): a
replica would answer 503 for up to that long after Milvus came back."""
PROPERTY = "fractal.record"
"""The collection property holding its Fractal record: name, bundle, dimensions, index kinds."""
COLLECTION_MISSING = 100
NOT_LOADED = 101

T = TypeVar("T")


class MilvusConnection:
    """One client of a Milvus server, shared by every collection of a service, made on first
    use (and again after a failure). ``on_error`` is told the operation of every failed call (the
    service counts them)."""

    def __init__(
        self,
        uri: str,
        token: str | None,
        timeout_s: float,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self._uri = uri
        self.uri = re.sub(r"//[^/@]*@", "//", uri)
        """The address as messages show it: without a ``user:password@`` part."""
        self._token = token or None
        self.timeout_s = timeout_s
        self._on_error = on_error
        self._client: MilvusClient | None = None
        self._lock = threading.Lock()
        self._health: tuple[float, str | None] = (-HEALTH_TTL_S, None)

    def _connected(self) -> MilvusClient:
        with self._lock:
            if self._client is None:
                from pymilvus import MilvusClient

                logging.getLogger("pymilvus").setLevel(logging.CRITICAL)  # errors are ours
                self._client = MilvusClient(
                    uri=self._uri,
                    token=self._token or "",
                    timeout=self.timeout_s,
                    grpc_options=RECONNECT_OPTIONS,
                )
            return self._client

    def call(self, operation: str, action: Callable[[MilvusClient], T]) -> T:
        """``action(client)``; a Milvus or connection failure becomes :class:`BackendUnavailable`
        (or :class:`CollectionMissing`, or :class:`NotLoaded`), counted by ``on_error``."""
        from pymilvus.exceptions import MilvusException

        try:
            return action(self._connected())
        except MilvusException as exc:
            code = getattr(exc, "code", None)
            if code == COLLECTION_MISSING:
                raise CollectionMissing(exc.message) from None
            if code == NOT_LOADED:
                raise NotLoaded(exc.message) from None
            failure = f"Milvus at {self.uri}: {operation} failed: {exc.message}"
        except Exception as exc:  # grpc and socket errors come in many types
            failure = f"Milvus at {self.uri}: {operation} failed: {type(exc).__name__}: {exc}"
        self.close()  # the next call takes a new client; the channel retries on its own
        if self._on_error is not None:
            self._on_error(operation)
        logger.warning("%s", failure)
        raise BackendUnavailable(failure.splitlines()[0])

    def problem(self) -> str | None:
        """None while the server answers, else why not (checked at most once a second)."""
        checked_at, problem = self._health
        if time.monotonic() - checked_at < HEALTH_TTL_S:
            return problem
        try:
            self.call("list_collections", lambda client: client.list_collections())
            problem = None
        except BackendUnavailable as exc:
            problem = str(exc)
        self._health = (time.monotonic(), problem)
        return problem

    def server_version(self) -> str:
        return self.call("get_server_version", lambda client: client.get_server_version())

    def wait(self, timeout_s: float) -> None:
        """Return once the server answers; :class:`BackendUnavailable` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.call("list_collections", lambda client: client.list_collections())
                return
            except BackendUnavailable:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # a client of a dead server may fail to close; it is dropped
                logger.debug("closing the Milvus client failed", exc_info=True)


class NotLoaded(BackendUnavailable):
    """The collection is not loaded into the server's memory (milvus-lite after a restart)."""


def stored_record(connection: MilvusConnection, name: str) -> dict | None:
    """A Milvus collection's Fractal record (None if it has none); :class:`CollectionMissing`
    if there is no such collection."""
    described = connection.call(
        "describe_collection", lambda client: client.describe_collection(name)
    )
    text = (described.get("properties") or {}).get(PROPERTY)
    try:
        return None if text is None else json.loads(text)
    except ValueError:
        return None


def list_collections(connection: MilvusConnection, prefix: str) -> Iterator[str]:
    """The server's collections whose names start with ``prefix``."""
    names = connection.call("list_collections", lambda client: client.list_collections())
    return (name for name in sorted(names) if name.startswith(prefix))
