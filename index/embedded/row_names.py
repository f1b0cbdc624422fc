"""The string id of every row the indexes hold, in memory, so that naming a search's hits costs no
store query.

A row id is given once and never reused, and a row's document id never changes, so the table
only grows by rows added and shrinks by rows the indexes dropped. It is kept beside the indexes,
under the collection's lock: a row gets its name before any index holds it, and loses it after
every index has dropped it, so every row a search finds is named as the state it saw.

The ids are UTF-8 bytes in one buffer; per row id, one 64-bit slot packs where its bytes start
and how many there are (0: the row has no name, as ids are never empty), so a lookup reads one
array. That is 8 bytes a row slot plus the id's bytes, against the hundred or so of a Python
``str`` in a ``dict``, and no Python object per row, so a table of millions leaves nothing
behind in the allocator. Arrays grow by half when full, from zeroed memory that the kernel maps
only when written; :meth:`RowNames.reserve` sizes them once for a known load. Dropped rows'
bytes stay in the buffer until they outweigh the live ones; then the buffer is rewritten with
the live ids alone.

A search's hits are named by one C call (``index/native_names.c``) that reads both arrays in
place and makes one Python object per hit; where that extension was not built, by the same loop
in Python (about three times as long: 13 against 4 µs for ten hits).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from index import native
from index.checks import MAX_ID_BYTES

_ENCODING = ("utf-8", "surrogatepass")
"""How ids are stored as bytes: as the store stores them, any ``str`` round-trips."""
MIN_COMPACT_BYTES = 1 << 20
"""Dropped ids' bytes below this never trigger a rewrite of the buffer."""
GROWTH = 1.5
"""How much an array grows when full."""
_LENGTH_BITS = 16
_LENGTH_MASK = (1 << _LENGTH_BITS) - 1
assert MAX_ID_BYTES <= _LENGTH_MASK
T = TypeVar("T")

_NATIVE = native.load("index._native_names")


def _row_and_name(name: str, row: int) -> tuple[int, str]:
    return row, name


def _grown(array: np.ndarray, size: int) -> np.ndarray:
    """``array``'s values in a zeroed array of at least ``size`` (grown by :data:`GROWTH`)."""
    if size <= len(array):
        return array
    grown = np.zeros(max(size, int(len(array) * GROWTH)), dtype=array.dtype)
    grown[: len(array)] = array
    return grown


class RowNames:
    """Row id → document id for the rows the indexes hold (see the module docstring). Not
    thread-safe by itself: the collection reads it under its shared lock and changes it under
    the exclusive one."""

    def __init__(self) -> None:
        self._slots = np.zeros(0, dtype=np.int64)
        """Per row id: the start of its id's bytes << 16 | their length (0: no name)."""
        self._buffer = np.zeros(0, dtype=np.uint8)
        self._view = self._buffer.data
        self._used = 0
        self._dropped_bytes = 0
        self._count = 0

    def __len__(self) -> int:
        """How many rows have a name."""
        return self._count

    @property
    def nbytes(self) -> int:
        """The bytes the table has written: its row slots and its ids (dropped ones included)."""
        return self._slots.nbytes + self._used

    def save(self, path: Path) -> Path:
        """Write the table to ``path`` (an ``.npz`` of its row slots and its ids' bytes, the
        unused room left out); return it."""
        top = int(np.flatnonzero(self._slots)[-1]) + 1 if self._count else 0
        with path.open("wb") as file:
            np.savez(file, slots=self._slots[:top], ids=self._buffer[: self._used])
        return path

    @classmethod
    def read(cls, path: Path) -> RowNames:
        """The table :meth:`save` wrote to ``path`` (:class:`ValueError` for one that is not
        such a table)."""
        with np.load(path, allow_pickle=False) as saved:
            slots, ids = saved["slots"], saved["ids"]
        if slots.dtype != np.int64 or ids.dtype != np.uint8 or slots.ndim != 1 or ids.ndim != 1:
            raise ValueError(f"{path.name} holds no row names")
        lengths = slots & _LENGTH_MASK
        if len(slots) and (
            (slots < 0).any() or ((slots >> _LENGTH_BITS) + lengths).max() > len(ids)
        ):
            raise ValueError(f"{path.name}: a row's id lies outside the ids' bytes")
        names = cls()
        names._slots = slots
        names._set_buffer(ids)
        names._used = len(ids)
        names._count = int(np.count_nonzero(slots))
        names._dropped_bytes = len(ids) - int(lengths.sum())
        return names

    def reserve(self, rows: int, id_bytes: int) -> None:
        """Room for row ids below ``rows`` and ``id_bytes`` more bytes of ids."""
        self._slots = _grown(self._slots, rows)
        self._set_buffer(_grown(self._buffer, self._used + id_bytes))

    def add(self, rows: Sequence[int] | np.ndarray, doc_ids: Sequence[str]) -> None:
        """Name these rows (distinct row ids without a name, one non-empty id each: row ids are
        never reused, so a row is named once)."""
        if len(rows) != len(doc_ids):
            raise ValueError(f"{len(rows)} rows and {len(doc_ids)} ids")
        if not len(rows):
            return
        rows = np.asarray(rows, dtype=np.int64)
        if rows.min() < 0 or len(np.unique(rows)) != len(rows):
            raise ValueError("row ids must be distinct and non-negative")
        encoded = b"".join(doc_id.encode(*_ENCODING) for doc_id in doc_ids)
        lengths = np.fromiter(map(len, doc_ids), dtype=np.int64, count=len(doc_ids))
        if len(encoded) != lengths.sum():  # some id is not ASCII: count its bytes
            lengths = np.array([len(doc_id.encode(*_ENCODING)) for doc_id in doc_ids])
        if not lengths.all() or lengths.max() > MAX_ID_BYTES:
            raise ValueError(f"ids must be non-empty and at most {MAX_ID_BYTES} bytes")
        self.reserve(int(rows.max()) + 1, len(encoded))
        self._buffer[self._used : self._used + len(encoded)] = np.frombuffer(encoded, np.uint8)
        starts = self._used + np.cumsum(lengths) - lengths
        self._slots[rows] = starts << _LENGTH_BITS | lengths
        self._used += len(encoded)
        self._count += len(rows)

    def drop(self, rows: Sequence[int] | np.ndarray) -> None:
        """Forget these rows' names (rows without one are ignored)."""
        rows = np.unique(np.asarray(rows, dtype=np.int64))
        rows = rows[(rows >= 0) & (rows < len(self._slots))]
        named = rows[self._slots[rows] != 0]
        if not len(named):
            return
        self._dropped_bytes += int((self._slots[named] & _LENGTH_MASK).sum())
        self._slots[named] = 0
        self._count -= len(named)
        if self._dropped_bytes > max(MIN_COMPACT_BYTES, self._used - self._dropped_bytes):
            self._compact()

    def get(self, row: int) -> str | None:
        """The id of ``row``, or None where it has none."""
        return self.names((row,)).get(row)

    def names(self, rows: Iterable[int]) -> dict[int, str]:
        """By row, the id of each of these rows that has one."""
        wanted = np.fromiter(dict.fromkeys(rows), dtype=np.int64)[None, :]
        return dict(self.named(wanted, wanted, _row_and_name)[0])

    def named(
        self, rows: np.ndarray, values: np.ndarray, make: Callable[[str, Any], T]
    ) -> list[list[T]]:
        """For each query of a ``(queries, k)`` matrix of row ids as a search returns them,
        ``make(id, value)`` for each of its rows that has a name, in order, with ``value`` from
        the matching cell of ``values`` (the search's scores) as a Python number: one gather of
        the slots, one string per named row, and no dictionary or list of names in between.
        FAISS's -1, and any row outside the table, has no name."""
        size = len(self._slots)
        if not size:
            return [[] for _ in range(rows.shape[0])]
        if _NATIVE is not None:
            matrix = np.ascontiguousarray(rows, dtype=np.int64)
            numbers = np.ascontiguousarray(
                values, dtype=np.float32 if values.dtype.kind == "f" else np.int64
            )
            return _NATIVE.named(self._slots, self._buffer, matrix, numbers, make)  # type: ignore[no-any-return]
        slots = self._slots.take(rows, mode="clip").tolist()  # rows outside: checked below
        view = self._view
        answer = []
        for query_rows, query_slots, query_values in zip(
            rows.tolist(), slots, values.tolist(), strict=True
        ):
            made = []
            for row, slot, value in zip(query_rows, query_slots, query_values, strict=True):
                if slot and 0 <= row < size:
                    start = slot >> _LENGTH_BITS
                    name = str(view[start : start + (slot & _LENGTH_MASK)], *_ENCODING)
                    made.append(make(name, value))
            answer.append(made)
        return answer

    def _set_buffer(self, buffer: np.ndarray) -> None:
        if buffer is not self._buffer:
            self._view.release()
            self._buffer, self._view = buffer, buffer.data

    def _compact(self) -> None:
        """Rewrite the buffer with the live ids alone, in row order."""
        live = np.flatnonzero(self._slots)
        lengths = self._slots[live] & _LENGTH_MASK
        starts = np.cumsum(lengths) - lengths
        # Each live byte's old position: its id's old start plus its offset within the id.
        old_starts = self._slots[live] >> _LENGTH_BITS
        positions = np.arange(int(lengths.sum())) + np.repeat(old_starts - starts, lengths)
        buffer = np.zeros(max(len(positions), 1), dtype=np.uint8)
        buffer[: len(positions)] = self._buffer[positions]
        self._slots[live] = starts << _LENGTH_BITS | lengths
        self._set_buffer(buffer)
        self._used = len(positions)
        self._dropped_bytes = 0
