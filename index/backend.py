"""What the service needs of an index backend: one collection of documents, searchable at each
served prefix.

Two backends implement :class:`IndexBackend`:

- ``embedded`` (:class:`index.embedded.Collection`): the SQLite store of record and FAISS
  indexes in a folder of the service's own disk, the default;
- ``milvus`` (:class:`index.milvus.MilvusCollection`): a Milvus server holds the documents and
  their indexes, so any number of stateless replicas serve one corpus.

The service picks one in a single factory (:func:`index.catalog.catalog_for`) and never
branches on the backend anywhere else. A backend that cannot reach its engine raises
:class:`BackendUnavailable`, which the service answers with 503; one whose disk is full refuses a
write with :class:`StorageFull` (nothing of the write stored), which the service answers with
507; a stored document that fails its checksum is :class:`RowCorrupt`, answered with 500.

What the methods answer with is in :mod:`index.types`: a search returns a
:class:`~index.types.SearchResult` (hits, timings, the filter report), ``stats`` a
:class:`~index.types.CollectionStats` whose indexes are :class:`~index.types.IndexStats`.
"""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from index.filters import Filter
from index.types import CollectionStats, Contents, SearchResult


class BackendUnavailable(RuntimeError):
    """The index engine could not be reached or did not answer in time; nothing was changed
    unless it said so. The message is one line, without secrets."""


class StorageFull(OSError):
    """The disk holding a collection is full (``ENOSPC``, SQLite's ``SQLITE_FULL``): the write
    that hit it was rolled back, nothing of it was stored. Snapshots and the full vectors' file
    raise it too."""

    def __init__(self, path: Path, cause: Exception) -> None:
        super().__init__(errno.ENOSPC, f"no space left on the disk holding {path} ({cause})")


class RowCorrupt(RuntimeError):
    """A stored document does not match its checksum: its bytes changed after it was written
    (or it was written without one). It is never served; the message names the document and
    says what to do, and the service answers 500 with it."""

    def __init__(self, doc_id: str, row: int, problem: str) -> None:
        self.doc_id = doc_id
        self.row = row
        self.problem = problem
        super().__init__(
            f"the stored document {doc_id!r} (row {row}) does not match its checksum "
            f"({problem}); it is not served: upsert it again or delete it, and run "
            "`fractal check` on the index folder"
        )


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an error it was raised from, says the disk is full: ``ENOSPC`` or
    ``EDQUOT`` (:class:`StorageFull` among them), or SQLite's ``SQLITE_FULL``."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
            return True
        exc = exc.__cause__
    return False


class CollectionMissing(LookupError):
    """The collection is gone from the engine (another replica deleted it)."""


class DocumentRefused(ValueError):
    """The backend cannot hold the document at ``position`` of an upsert (its ``part``: text
    or metadata); nothing of the upsert was written. The message is one line."""

    def __init__(self, position: int, part: str, message: str) -> None:
        super().__init__(message)
        self.position = position
        self.part = part


class IndexBackend(Protocol):
    """One collection: documents with full vectors, searched by cosine (or SFS) at each served
    prefix dimension with the index kinds of ``layout``. Every method blocks; the service calls
    them in threads, or a small search on its event loop while ``searches_now`` holds."""

    dim: int
    prefix_dims: tuple[int, ...]
    layout: dict[int, tuple[str, ...]]
    index_kinds: tuple[str, ...]
    fragment_dim: int | None
    opened_with_work: bool

    @property
    def searches_now(self) -> bool:
        """Whether a search would start at once: it waits for no write and no network."""
        ...

    def upsert(
        self,
        ids: Sequence[str],
        texts: Sequence[str],
        vectors: np.ndarray,
        metadata: Sequence[dict] | None = None,
    ) -> int:
        """Store (or replace) documents, all or nothing; durable when it returns."""
        ...

    def delete(self, ids: Sequence[str]) -> int:
        """Delete documents by id; how many there were."""
        ...

    def contents_of(self, doc_ids: Sequence[str]) -> list[Contents | None]:
        """Text and metadata in the order of ``doc_ids`` (None where there is no such id)."""
        ...

    def present(self, doc_ids: Sequence[str]) -> set[str]:
        """Which of these ids are stored."""
        ...

    def search(
        self,
        query_vectors: np.ndarray,
        k: int,
        dim: int,
        kind: str = "exact",
        scoring: str = "cosine",
        *,
        ef_search: int | None = None,
        where: Filter | None = None,
        contents: bool = False,
    ) -> SearchResult:
        """The ``k`` best documents per query at the ``dim`` prefix, with the seconds spent and
        how a filter was applied (see :meth:`index.Collection.search`); with ``contents``, each
        hit carries its document's text and metadata (a hit without them is left out)."""
        ...

    def search_c2f(
        self,
        query_vectors: np.ndarray,
        k: int,
        shortlist_dim: int,
        factor: int = 4,
        kind: str = "exact",
        *,
        ef_search: int | None = None,
        where: Filter | None = None,
        contents: bool = False,
    ) -> SearchResult:
        """Coarse-to-fine: a ``k × factor`` shortlist at ``shortlist_dim``, re-ranked exactly by
        full-dimension cosine (see :meth:`index.Collection.search_c2f`); ``contents`` as for
        :meth:`search`."""
        ...

    def stats(self) -> CollectionStats:
        """Documents and indexes now."""
        ...

    def snapshot(self) -> int:
        """Persist what a restart would otherwise rebuild; the change counter it reflects."""
        ...

    def close(self) -> None:
        """Release what this process holds (the data stays)."""
        ...
