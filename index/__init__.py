"""Document store of record (SQLite) and derived FAISS indexes per served resolution.

Numpy, FAISS, SQLite and the standard library only: no HTTP, no torch, no imports from
``training`` or ``service``. :class:`Collection` is the entry point.
"""

from index.collection import Collection, CollectionStats, Hit
from index.kinds import HnswParams, PqParams
from index.store import Document

__all__ = ["Collection", "CollectionStats", "Document", "Hit", "HnswParams", "PqParams"]
