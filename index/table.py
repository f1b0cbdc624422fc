"""The live documents in memory: FAISS id, string id and full-dimension unit vector.

C2F re-ranks a shortlist with these vectors, results are turned from FAISS ids into string ids
with them, and every index is (re)built from them. Rows sit in one float32 matrix that grows by
doubling; removing a row moves the last row into its place.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class VectorTable:
    """Full unit vectors keyed by FAISS id. Not thread-safe: the caller locks."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._matrix = np.zeros((0, dim), dtype=np.float32)
        self._ids = np.zeros(0, dtype=np.int64)
        self._doc_ids: list[str] = []
        self._slot: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._doc_ids)

    @property
    def ids(self) -> np.ndarray:
        """The FAISS ids present, in slot order (a copy)."""
        return self._ids[: len(self)].copy()

    @property
    def vectors(self) -> np.ndarray:
        """The unit vectors, in the order of :attr:`ids` (a view: read it under the lock)."""
        return self._matrix[: len(self)]

    def add(self, ids: np.ndarray, doc_ids: Sequence[str], vectors: np.ndarray) -> None:
        """Add rows for FAISS ids that are not present yet."""
        start, end = len(self), len(self) + len(ids)
        if end > len(self._matrix):
            capacity = max(end, 2 * len(self._matrix), 1024)
            matrix = np.zeros((capacity, self.dim), dtype=np.float32)
            matrix[:start] = self._matrix[:start]
            row_ids = np.zeros(capacity, dtype=np.int64)
            row_ids[:start] = self._ids[:start]
            self._matrix, self._ids = matrix, row_ids
        self._matrix[start:end] = vectors
        self._ids[start:end] = ids
        self._doc_ids.extend(doc_ids)
        self._slot.update((int(row), slot) for slot, row in enumerate(ids, start))

    def remove(self, ids: np.ndarray) -> None:
        """Remove rows by FAISS id; ids not present are ignored."""
        for row in ids:
            slot = self._slot.pop(int(row), None)
            if slot is None:
                continue
            last = len(self) - 1
            if slot != last:
                moved = int(self._ids[last])
                self._matrix[slot] = self._matrix[last]
                self._ids[slot] = moved
                self._doc_ids[slot] = self._doc_ids[last]
                self._slot[moved] = slot
            self._doc_ids.pop()

    def doc_id(self, row: int) -> str:
        return self._doc_ids[self._slot[row]]

    def gather(self, ids: np.ndarray) -> np.ndarray:
        """The unit vectors of these FAISS ids (all must be present), one row each."""
        return self._matrix[[self._slot[int(row)] for row in ids]]
