"""The index backends: collections of documents with full vectors, searchable at each served
prefix, behind one interface (:mod:`index.backend`, answering with :mod:`index.types`).

- :mod:`index.embedded`: the SQLite store of record and FAISS indexes in one folder
  (:class:`Collection`, the default);
- :mod:`index.milvus`: a collection held by a Milvus server.

Numpy, FAISS, SQLite and the standard library only (and the bundle's manifest, which
:mod:`index.catalog` reads, and pydantic for :mod:`index.settings`, the variables that say where
collections are stored): no HTTP, no torch, no imports from ``training`` or ``service``.
:func:`index.catalog.catalog_for` opens collections in the configured backend for the service
and ``fractal import``.
"""

from index.embedded import Collection
from index.faiss_indexes import HnswParams, PqParams
from index.types import CollectionStats, Document, Hit, IndexStats, SearchResult

__all__ = [
    "Collection",
    "CollectionStats",
    "Document",
    "Hit",
    "HnswParams",
    "IndexStats",
    "PqParams",
    "SearchResult",
]
