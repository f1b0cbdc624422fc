"""What a batch costs the encoder, measured as it runs: a fixed part per batch and a part per
text, fitted online to the batches encoded, and the wait a queue of texts therefore stands for.

A batch of ``n`` texts takes about ``fixed + n · per_text`` seconds: the fixed part (the call,
the session's dispatch, the smallest padded shapes) dominates a batch of one or two, and the
per-text part a full one. Dividing a batch's seconds by its texts mixes the two: measured on the
small batches of a lightly loaded queue, it charges every text the whole fixed part, so a queue
that fills up looks several times slower than it is, admission sheds what the encoder could
have served in time, the batches stay small, and the estimate stays high. :class:`BatchCost`
fits both parts by least squares over the recent batches (exponentially weighted, the newest
with weight :data:`SMOOTHING`), and prices a queue as the batches it will take:
``batches · fixed + texts · per_text``.

While the batches seen are too alike in size to tell the parts apart (or the fit says a text
costs nothing or a batch less than nothing, as noise can), a text is priced at the mean seconds
per text, fixed part included: the larger, cautious estimate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SMOOTHING = 0.2
"""Weight of the newest batch in the running sums."""
MIN_SIZE_VARIANCE = 0.25
"""Variance of the recent batch sizes (texts²) below which the two parts are not told apart."""


@dataclass
class _Sums:
    """Exponentially weighted means of ``n``, ``t``, ``n²`` and ``n·t``."""

    n: float
    t: float
    nn: float
    nt: float

    def update(self, n: float, t: float) -> None:
        self.n += SMOOTHING * (n - self.n)
        self.t += SMOOTHING * (t - self.t)
        self.nn += SMOOTHING * (n * n - self.nn)
        self.nt += SMOOTHING * (n * t - self.nt)

    def parts(self) -> tuple[float, float]:
        """``(fixed, per_text)`` by least squares, or ``(0, mean per text)`` (see the module
        docstring)."""
        variance = self.nn - self.n * self.n
        if variance >= MIN_SIZE_VARIANCE:
            per_text = (self.nt - self.n * self.t) / variance
            fixed = self.t - per_text * self.n
            if per_text > 0 and fixed >= 0:
                return fixed, per_text
        return 0.0, self.t / self.n


class BatchCost:
    """The fitted ``fixed`` seconds per batch and ``per_text`` seconds per text, refitted once
    per batch (admission reads them for every request)."""

    def __init__(self) -> None:
        self._sums: _Sums | None = None
        self._parts: tuple[float, float] | None = None

    def observe(self, texts: int, seconds: float) -> None:
        """Count one batch of ``texts`` texts that took ``seconds``."""
        if texts < 1:
            raise ValueError(f"a batch has at least one text, got {texts}")
        if self._sums is None:
            self._sums = _Sums(texts, seconds, texts * texts, texts * seconds)
        else:
            self._sums.update(texts, seconds)
        self._parts = self._sums.parts()

    def parts(self) -> tuple[float, float] | None:
        """``(fixed, per_text)`` seconds, or None before any batch; ``fixed`` is 0 while the
        parts cannot be told apart (see the module docstring)."""
        return self._parts

    def wait_s(self, queued: int, in_flight: int, max_batch: int) -> float | None:
        """Seconds until ``queued`` texts, in batches of up to ``max_batch``, and a batch of
        ``in_flight`` texts being encoded are done; None before any batch was measured."""
        if self._parts is None:
            return None
        fixed, per_text = self._parts
        batches = math.ceil(queued / max_batch) + (1 if in_flight else 0)
        return batches * fixed + (queued + in_flight) * per_text
