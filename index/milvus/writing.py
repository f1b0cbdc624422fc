"""Writing to a Milvus collection: documents checked whole before any is sent, then upserted
in acknowledged chunks; deletes by key."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from index.backend import DocumentRefused
from index.checks import checked_documents
from index.fragments import in_space
from index.milvus import params
from index.milvus.filters import UnfilterableMetadata, filterable
from index.milvus.opening import FILTERABLE, KEY, MAX_TEXT_BYTES, key_of
from index.milvus.searching import Searching
from index.vectors import unit_rows

if TYPE_CHECKING:
    from pymilvus import MilvusClient


class Writing(Searching):
    """Upserts and deletes."""

    def _checked_rows(
        self, ids: Sequence[str], texts: Sequence[str], metadata: list[dict]
    ) -> list[dict[str, Any]]:
        """The Milvus rows of checked documents, without their vectors; :class:`DocumentRefused`
        for one Milvus cannot hold."""
        rows = []
        for position, (doc_id, text, meta) in enumerate(zip(ids, texts, metadata, strict=True)):
            meta_text = json.dumps(meta, ensure_ascii=False)
            for what, value in (("text", text), ("metadata", meta_text)):
                size = len(value.encode("utf-8"))
                if size > MAX_TEXT_BYTES:
                    raise DocumentRefused(
                        position,
                        what,
                        f"the {what} takes {size:,} bytes of UTF-8; the Milvus backend stores "
                        f"at most {MAX_TEXT_BYTES:,}",
                    )
            try:
                matches = filterable(meta)
            except UnfilterableMetadata as exc:
                raise DocumentRefused(position, "metadata", str(exc)) from None
            rows.append(
                {KEY: key_of(doc_id), "text": text, "metadata": meta_text, FILTERABLE: matches}
            )
        return rows

    def _with_vectors(self, rows: list[dict[str, Any]], unit: np.ndarray) -> list[dict[str, Any]]:
        """Copies of ``rows`` with every vector field of their unit vectors ``unit``, as lists."""
        chunk = [dict(row) for row in rows]
        for vector in self._fields():
            values = in_space(vector.scoring, vector.dim, unit, self.fragment_dim).tolist()
            for row, value in zip(chunk, values, strict=True):
                row[vector.name] = value
        return chunk

    def upsert(
        self,
        ids: Sequence[str],
        texts: Sequence[str],
        vectors: np.ndarray,
        metadata: Sequence[dict] | None = None,
    ) -> int:
        """Store or replace documents; acknowledged by Milvus when this returns. Every document
        is checked before any is sent. Returns how many were written.

        The vector fields of a chunk are made just before it is sent: as Python lists (what the
        client sends), all of a large upsert's would take about 32 bytes per number, 3 GB for
        100,000 documents of 256 + 64 + 64 + 192 + 192 + 256 numbers."""
        documents, matrix = checked_documents(ids, texts, vectors, metadata, self.dim)
        started = time.perf_counter()
        rows = self._checked_rows(
            [d.id for d in documents], [d.text for d in documents], [d.metadata for d in documents]
        )
        unit = unit_rows(matrix)
        mapping, sending = time.perf_counter() - started, 0.0
        for start in range(0, len(rows), params.UPSERT_CHUNK):
            began = time.perf_counter()
            chunk = self._with_vectors(
                rows[start : start + params.UPSERT_CHUNK], unit[start : start + params.UPSERT_CHUNK]
            )
            mapped = time.perf_counter()

            def upsert(client: MilvusClient, chunk: list[dict[str, Any]] = chunk) -> object:
                return client.upsert(self.name, chunk)

            self._call("upsert", upsert)
            mapping, sending = mapping + mapped - began, sending + time.perf_counter() - mapped
        self._ingest_seconds["full_vectors"] += mapping
        self._ingest_seconds["store"] += sending
        return len(rows)

    def delete(self, ids: Sequence[str]) -> int:
        """Delete documents by id (unknown ids are ignored); how many there were."""
        if isinstance(ids, str) or not all(isinstance(i, str) and i for i in ids):
            raise ValueError("ids must be a sequence of non-empty strings")
        present = self.present(ids)
        if present:
            keys = [key_of(doc_id) for doc_id in present]
            self._call("delete", lambda c: c.delete(self.name, ids=keys))
        return len(present)
