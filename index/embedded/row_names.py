"""The string id of every row the indexes hold, in memory, so that naming a search's hits costs no
store query.

A row id is given once and never reused, and a row's document id never changes, so the table
only grows by rows added and shrinks by rows the indexes dropped. It is kept beside the indexes,
under the collection's lock: a row gets its name before any index holds it, and loses it after
every index has dropped it, so every row a search finds is named as the state it saw.

The ids are UTF-8 bytes in one buffer; per row id, where its bytes start and how many there are
(``-1`` for a row with no name): 12 bytes a row slot plus the id's bytes, against the hundred
or so of a Python ``str`` in a ``dict``. Dropped rows' bytes stay in the buffer until they
outweigh the live ones; then the buffer is rewritten with the live ids alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

_ENCODING = ("utf-8", "surrogatepass")
"""How ids are stored as bytes: as the store stores them, any ``str`` round-trips."""
MIN_COMPACT_BYTES = 1 << 20
"""Dropped ids' bytes below this never trigger a rewrite of the buffer."""


class RowNames:
    """Row id → document id for the rows the indexes hold (see the module docstring). Not
    thread-safe by itself: the collection reads it under its shared lock and changes it under
    the exclusive one."""

    def __init__(self) -> None:
        self._starts = np.zeros(0, dtype=np.int64)
        self._lengths = np.zeros(0, dtype=np.int32)
        self._bytes = bytearray()
        self._dropped_bytes = 0
        self._count = 0

    def __len__(self) -> int:
        """How many rows have a name."""
        return self._count

    @property
    def nbytes(self) -> int:
        """The memory the table holds: its per-row arrays and its buffer."""
        return self._starts.nbytes + self._lengths.nbytes + len(self._bytes)

    def add(self, rows: Sequence[int] | np.ndarray, doc_ids: Sequence[str]) -> None:
        """Name these rows (distinct row ids, one id each)."""
        if len(rows) != len(doc_ids):
            raise ValueError(f"{len(rows)} rows and {len(doc_ids)} ids")
        if not len(rows):
            return
        rows = np.asarray(rows, dtype=np.int64)
        if rows.min() < 0 or len(np.unique(rows)) != len(rows):
            raise ValueError("row ids must be distinct and non-negative")
        self._reserve(int(rows.max()) + 1)
        self.drop(rows)  # a row named already is renamed: its old bytes count as dropped
        encoded = [doc_id.encode(*_ENCODING) for doc_id in doc_ids]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        self._starts[rows] = len(self._bytes) + np.cumsum(lengths) - lengths
        self._lengths[rows] = lengths
        self._bytes += b"".join(encoded)
        self._count += len(rows)

    def drop(self, rows: Sequence[int] | np.ndarray) -> None:
        """Forget these rows' names (rows without one are ignored)."""
        rows = np.unique(np.asarray(rows, dtype=np.int64))
        rows = rows[(rows >= 0) & (rows < len(self._lengths))]
        named = rows[self._lengths[rows] >= 0]
        if not len(named):
            return
        self._dropped_bytes += int(self._lengths[named].sum())
        self._lengths[named] = -1
        self._count -= len(named)
        if self._dropped_bytes > max(MIN_COMPACT_BYTES, len(self._bytes) - self._dropped_bytes):
            self._compact()

    def get(self, row: int) -> str | None:
        """The id of ``row``, or None where it has none."""
        if not 0 <= row < len(self._lengths):
            return None
        length = int(self._lengths[row])
        if length < 0:
            return None
        start = int(self._starts[row])
        return self._bytes[start : start + length].decode(*_ENCODING)

    def names(self, rows: Iterable[int]) -> dict[int, str]:
        """By row, the id of each of these rows that has one."""
        size = len(self._lengths)
        wanted = [row for row in dict.fromkeys(rows) if 0 <= row < size]
        starts, lengths, buffer = (
            self._starts[wanted].tolist(),
            self._lengths[wanted].tolist(),
            self._bytes,
        )
        return {
            row: buffer[start : start + length].decode(*_ENCODING)
            for row, start, length in zip(wanted, starts, lengths, strict=True)
            if length >= 0
        }

    def _reserve(self, size: int) -> None:
        """Room for row ids below ``size``, grown by at least half each time."""
        if size <= len(self._lengths):
            return
        grown = max(size, len(self._lengths) * 3 // 2, 1024)
        starts = np.zeros(grown, dtype=np.int64)
        lengths = np.full(grown, -1, dtype=np.int32)
        starts[: len(self._starts)] = self._starts
        lengths[: len(self._lengths)] = self._lengths
        self._starts, self._lengths = starts, lengths

    def _compact(self) -> None:
        """Rewrite the buffer with the live ids alone, in row order."""
        live = np.flatnonzero(self._lengths >= 0)
        old = memoryview(self._bytes)
        pieces = [
            old[start : start + length]
            for start, length in zip(
                self._starts[live].tolist(), self._lengths[live].tolist(), strict=True
            )
        ]
        lengths = self._lengths[live].astype(np.int64)
        self._starts[live] = np.cumsum(lengths) - lengths
        buffer = bytearray(b"".join(pieces))
        del pieces
        old.release()
        self._bytes = buffer
        self._dropped_bytes = 0
