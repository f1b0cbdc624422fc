"""The service's encoder as served, in this process: :class:`service.runtime.Runtime` with its
micro-batching queue, on an event loop of its own.

:class:`ServedRuntime` loads a runtime as the service does (:func:`service.startup.load_runtime`)
and starts it on an event loop in a background thread, where uvicorn would run it.
:meth:`ServedRuntime.encode` sends every text as its own ``Runtime.embed`` call, all at once:
``len(texts)`` concurrent callers of one text each, which the queue gathers into encoder calls
of up to ``max_batch_size`` texts. The calling thread waits for the answers, so a call's time
includes the hand-over to the loop and back (tens of microseconds); HTTP is not included.
:meth:`ServedRuntime.encoder_calls` reads how the queue batched them from the service's own
metrics.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Sequence
from types import TracebackType
from typing import Any, TypeVar

import numpy as np

from service.settings import Settings
from service.startup import load_runtime

T = TypeVar("T")


class ServedRuntime:
    """A started runtime on ``settings``; :meth:`close` (or leaving the ``with`` block) stops
    it as the service's shutdown does."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.runtime = load_runtime(settings)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="served-runtime")
        self._thread.start()
        try:
            self._call(self._start())
        except BaseException:
            self._stop_loop()
            raise

    async def _start(self) -> None:
        self.runtime.start()

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the runtime's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def _embed_each(self, texts: Sequence[str]) -> np.ndarray:
        encoded = await asyncio.gather(*(self.runtime.embed([text]) for text in texts))
        return np.concatenate([one.vectors for one in encoded])

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Full embeddings of ``texts``, one concurrent ``Runtime.embed`` call per text."""
        return self._call(self._embed_each(texts))

    def encoder_calls(self) -> tuple[int, int]:
        """Texts encoded and encoder calls made so far (``fractal_encode_batch_size``)."""
        registry = self.runtime.metrics.registry
        texts = registry.get_sample_value("fractal_encode_batch_size_sum") or 0.0
        calls = registry.get_sample_value("fractal_encode_batch_size_count") or 0.0
        return int(texts), int(calls)

    def close(self) -> None:
        try:
            self._call(self.runtime.stop())
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> ServedRuntime:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
