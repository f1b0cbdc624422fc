"""The rows a metadata filter matched, in the two forms a filtered search needs.

``rows`` (ascending int64 row ids) for an exact search over just those rows, and a bitmap (bit
``r % 8`` of byte ``r // 8`` set for row ``r``) behind a FAISS ``IDSelectorBitmap``: the cheapest
membership test FAISS offers (one load and a shift, against a hash lookup for
``IDSelectorBatch``), checked on every vector a search scores. FAISS ids are the store's row ids
(:mod:`index.faiss_indexes`), so the selector applies to every index kind as it is.
"""

from __future__ import annotations

import faiss
import numpy as np


class RowSet:
    """Ascending, distinct row ids; immutable once made (shared by concurrent searches)."""

    def __init__(self, rows: np.ndarray) -> None:
        self.rows = np.ascontiguousarray(rows, dtype=np.int64)
        self.rows.flags.writeable = False
        self._bitmap: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def bitmap(self) -> np.ndarray:
        """One bit per row id up to the largest, little-endian within each byte (made once)."""
        if self._bitmap is None:
            mask = np.zeros(int(self.rows[-1]) + 1 if len(self.rows) else 0, dtype=bool)
            mask[self.rows] = True
            self._bitmap = np.packbits(mask, bitorder="little")
        return self._bitmap

    @property
    def nbytes(self) -> int:
        """Memory held once the bitmap is made: the ids and the bitmap."""
        return self.rows.nbytes + (int(self.rows[-1]) // 8 + 1 if len(self.rows) else 0)

    def selector(self) -> faiss.IDSelectorBitmap:
        """A FAISS selector of these rows (it keeps the bitmap alive)."""
        # FAISS's Python layer takes the numpy bitmap (its SWIG stubs know only (n, pointer)).
        return faiss.IDSelectorBitmap(self.bitmap)  # type: ignore[call-arg,arg-type]

    def contains(self, ids: np.ndarray) -> np.ndarray:
        """Which of ``ids`` (any shape; -1 for none) are in the set."""
        bitmap = self.bitmap
        ids = np.asarray(ids, dtype=np.int64)
        inside = (ids >= 0) & (ids < 8 * len(bitmap))
        found = np.zeros(ids.shape, dtype=bool)
        picked = ids[inside]
        found[inside] = (bitmap[picked >> 3] >> (picked & 7)) & 1 == 1
        return found

    def below(self, limit: int) -> np.ndarray:
        """The rows under ``limit``."""
        return self.rows[: int(np.searchsorted(self.rows, limit))]
