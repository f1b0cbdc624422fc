"""Document store of record (SQLite) and derived FAISS indexes per served resolution.

Numpy, FAISS, SQLite and the standard library only (and the bundle's manifest, which
:mod:`index.catalog` reads): no HTTP, no torch, no imports from ``training`` or ``service``.
:class:`Collection` is the entry point; :func:`index.catalog.catalog_for` opens collections in
the configured backend for the service and ``fractal import``.
"""

from index.collection import Collection
from index.kinds import HnswParams, PqParams
from index.store import Document
from index.types import CollectionStats, Hit, IndexStats, SearchResult

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
