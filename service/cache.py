"""The query embedding cache in Redis, shared by every replica serving the same bundle.

A text's full, unnormalised embedding is stored under ``fractal:emb:<bundle hash>:<dim>:<sha256
of the text>`` with a TTL; the value is the token count (int32) followed by the vector
(little-endian float32). Prefixes are cut from the full vector, so one entry serves every
requested dimension, and vectors of another bundle can never be returned.

Redis is an optimisation, never a dependency: every exchange with Redis (a fresh connection's
connect and handshake included) has one deadline, the timeout; a failure is counted and logged
(once per outage, with no address or password) and the request goes on uncached. After a
failure the cache is bypassed for ``retry_s`` seconds, so a dead Redis costs one timeout per
pause rather than one per request; then the next request tries again, and redis-py opens a
fresh connection, which is how the cache reconnects by itself.

A request waits on its lookup only: what it encoded is queued (at most ``MAX_PENDING_WRITES``
entries; more are dropped) and stored by one background writer, ``WRITE_BATCH`` entries per
pipeline. So a request never waits more than one timeout on the cache, even when Redis hangs
between its lookup and the end of its encoding.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Sequence
from contextlib import suppress
from itertools import islice
from typing import cast

import numpy as np
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from service.metrics import CACHE_ERROR, CACHE_GET, CACHE_HIT, CACHE_MISS, CACHE_SET, Metrics

logger = logging.getLogger("service")

KEY_PREFIX = "fractal:emb"
TOKENS_DTYPE = np.dtype("<i4")
VECTOR_DTYPE = np.dtype("<f4")
MAX_PENDING_WRITES = 4096
"""Entries waiting for the background writer; beyond them new entries are dropped."""
WRITE_BATCH = 128
"""Entries per pipeline: a few hundred kilobytes, far within a timeout on a live Redis."""


class EmbeddingCache:
    """Full embeddings by text for one bundle; see the module docstring."""

    def __init__(
        self,
        url: str,
        bundle_hash: str,
        dim: int,
        ttl_s: int,
        timeout_s: float,
        retry_s: float,
        metrics: Metrics,
    ) -> None:
        self.dim = dim
        self.ttl_s = ttl_s
        self.retry_s = retry_s
        self._url = url
        self._timeout_s = timeout_s
        self._key_prefix = f"{KEY_PREFIX}:{bundle_hash}:{dim}:"
        self._metrics = metrics
        self._client: Redis | None = None
        self._paused_until = 0.0
        self._failing = False
        self._pending: dict[str, bytes] = {}
        self._queued = asyncio.Event()
        self._writer: asyncio.Task | None = None

    def connect(self) -> None:
        """Create the client (it connects on first use) and start the background writer, on
        the running event loop."""
        self._client = Redis.from_url(
            self._url,
            socket_timeout=self._timeout_s,
            socket_connect_timeout=self._timeout_s,
            retry=Retry(NoBackoff(), 0),
        )
        self._writer = asyncio.get_running_loop().create_task(self._write(), name="cache-writer")

    async def close(self) -> None:
        """Stop the writer (entries still queued are dropped) and close the client."""
        if self._writer is not None:
            self._writer.cancel()
            with suppress(asyncio.CancelledError):
                await self._writer
            self._writer = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def key(self, text: str) -> str:
        return self._key_prefix + hashlib.sha256(text.encode("utf-8")).hexdigest()

    def _available(self) -> bool:
        return self._client is not None and time.monotonic() >= self._paused_until

    def _failed(self, operation: str, exc: Exception) -> None:
        self._metrics.cache_errors.labels(operation=operation).inc()
        self._paused_until = time.monotonic() + self.retry_s
        if not self._failing:
            self._failing = True
            logger.warning(
                "embedding cache unavailable (%s on %s); serving uncached, retrying every %.1f s",
                type(exc).__name__,
                operation,
                self.retry_s,
            )

    def _succeeded(self) -> None:
        if self._failing:
            self._failing = False
            logger.warning("embedding cache reachable again")

    def _decode(self, value: bytes) -> tuple[np.ndarray, int] | None:
        """The vector and token count of a stored value; None for one of another shape."""
        expected = TOKENS_DTYPE.itemsize + self.dim * VECTOR_DTYPE.itemsize
        if len(value) != expected:
            return None
        tokens = int(np.frombuffer(value, TOKENS_DTYPE, count=1)[0])
        vector = np.frombuffer(value, VECTOR_DTYPE, offset=TOKENS_DTYPE.itemsize)
        return vector.astype(np.float32), tokens

    def _encode(self, vector: np.ndarray, tokens: int) -> bytes:
        return np.array([tokens], TOKENS_DTYPE).tobytes() + vector.astype(VECTOR_DTYPE).tobytes()

    async def get_many(self, texts: Sequence[str]) -> list[tuple[np.ndarray, int] | None]:
        """The cached (vector, tokens) of each text, None where missing or Redis failed."""
        found: list[tuple[np.ndarray, int] | None] = [None] * len(texts)
        lookups = self._metrics.cache_lookups
        if not self._available():
            lookups.labels(result=CACHE_ERROR).inc(len(texts))
            return found
        assert self._client is not None
        try:
            async with asyncio.timeout(self._timeout_s):
                values = await self._client.mget([self.key(text) for text in texts])
        except (RedisError, OSError) as exc:  # OSError: TimeoutError too
            self._failed(CACHE_GET, exc)
            lookups.labels(result=CACHE_ERROR).inc(len(texts))
            return found
        self._succeeded()
        for position, value in enumerate(values):
            # bytes: the client does not decode responses
            found[position] = None if value is None else self._decode(cast(bytes, value))
        hits = sum(entry is not None for entry in found)
        lookups.labels(result=CACHE_HIT).inc(hits)
        lookups.labels(result=CACHE_MISS).inc(len(texts) - hits)
        return found

    def put_many(self, texts: Sequence[str], vectors: np.ndarray, tokens: np.ndarray) -> None:
        """Queue full embeddings for the background writer (stored with the TTL); never waits.
        Dropped while the cache is bypassed after a failure, and beyond ``MAX_PENDING_WRITES``."""
        if not self._available():
            return
        room = MAX_PENDING_WRITES - len(self._pending)
        for text, vector, count in islice(zip(texts, vectors, tokens, strict=True), room):
            self._pending[self.key(text)] = self._encode(vector, int(count))
        self._queued.set()

    async def _write(self) -> None:
        """The background writer: store what is queued, ``WRITE_BATCH`` entries per pipeline,
        one pipeline at a time; a Redis failure is counted, and what is queued then dropped."""
        while True:
            await self._queued.wait()
            self._queued.clear()
            while self._pending and self._available():
                keys = list(islice(self._pending, WRITE_BATCH))
                await self._store({key: self._pending.pop(key) for key in keys})
            self._pending.clear()

    async def _store(self, entries: dict[str, bytes]) -> None:
        assert self._client is not None
        try:
            async with asyncio.timeout(self._timeout_s):
                async with self._client.pipeline(transaction=False) as pipe:
                    for key, value in entries.items():
                        pipe.set(key, value, ex=self.ttl_s)
                    await pipe.execute()
        except (RedisError, OSError) as exc:
            self._failed(CACHE_SET, exc)
            return
        self._succeeded()
