"""Writing to an embedded collection: an upsert or delete commits to the store first, then
updates the full vectors and every index one chunk at a time under the exclusive lock, and
swaps in indexes rebuilt beside the live ones."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from index.checks import checked_documents
from index.embedded.state import CollectionState
from index.vectors import unit_rows

CHUNK = 256
"""Documents added to an index per hold of the exclusive lock."""


class Writing(CollectionState):
    """Upserts and deletes (see the package docstring for the locking)."""

    def upsert(
        self,
        ids: Sequence[str],
        texts: Sequence[str],
        vectors: np.ndarray,
        metadata: Sequence[dict] | None = None,
    ) -> int:
        """Add documents, replacing those with the same ids; return the store's change counter.

        ``vectors`` are full, ``(len(ids), dim)``. The write is committed before the indexes are
        updated, and both are done when this returns.
        """
        documents, matrix = checked_documents(ids, texts, vectors, metadata, self.dim)
        unit = unit_rows(matrix)
        spaces = {(spec.scoring, spec.dim) for spec in self._specs.values()}
        mapped = {space: self._map(*space, unit) for space in spaces}
        with self._writer:
            # Room for the new rows' full vectors first: a full disk refuses the write whole.
            self._vectors.reserve(self._store.next_row_id + len(documents))
            started = time.perf_counter()
            upserted = self._store.upsert(documents)
            self._generation += 1
            self._ingest_seconds["store"] += time.perf_counter() - started
            self._applied = None  # until the indexes have caught up; see snapshot()
            rows = np.array(upserted.rows, dtype=np.int64)
            doc_ids = [document.id for document in documents]
            for start in range(0, len(rows), CHUNK):
                chunk = slice(start, start + CHUNK)
                old = np.array(
                    [row for row in upserted.replaced[chunk] if row is not None], np.int64
                )
                started = time.perf_counter()
                with self._lock.write():
                    self._vectors.write(rows[chunk], unit[chunk])
                    self._names.add(rows[chunk], doc_ids[chunk])
                    self._count += len(rows[chunk]) - len(old)
                written = time.perf_counter()
                for name, spec in self._specs.items():
                    with self._lock.write():
                        index = self._indexes[name]
                        if old.size:
                            index.remove(old)
                        index.add(rows[chunk], mapped[spec.scoring, spec.dim][chunk])
                if old.size:  # no index holds the replaced rows now
                    with self._lock.write():
                        self._names.drop(old)
                self._ingest_seconds["full_vectors"] += written - started
                self._ingest_seconds["indexes"] += time.perf_counter() - written
            started = time.perf_counter()
            self._swap_in_replacements()
            self._ingest_seconds["indexes"] += time.perf_counter() - started
            self._applied = upserted.counter
        return upserted.counter

    def delete(self, ids: Sequence[str]) -> int:
        """Delete documents by id (unknown ids are ignored); return how many were deleted."""
        if isinstance(ids, str) or not all(isinstance(i, str) and i for i in ids):
            raise ValueError("ids must be a sequence of non-empty strings")
        with self._writer:
            deleted = self._store.delete(ids)
            self._generation += 1
            self._applied = None
            rows = np.array(deleted.removed, dtype=np.int64)
            if rows.size:
                for name in self._specs:
                    with self._lock.write():
                        self._indexes[name].remove(rows)
                with self._lock.write():
                    self._names.drop(rows)
                    self._count -= len(rows)
                self._swap_in_replacements()
            self._applied = deleted.counter
        return len(rows)
