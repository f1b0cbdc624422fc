"""The Milvus index backend: a collection held by a Milvus server, so that any number of stateless
service replicas serve one corpus.

One Fractal collection is one Milvus collection with these fields:

- ``key``: the primary key, the lowercase hex of the document id's UTF-8. Ids are free text, and
  Milvus expressions have no escape for every character an id may hold; the hex needs none and
  is decoded back to the id on every read.
- ``text`` and ``metadata`` (its JSON text): what a hit shows, returned as given.
- ``filterable``: the metadata in the form filters are evaluated on (:mod:`index.milvus.filters`,
  the same grammar and matches as the embedded backend).
- ``full``: the full vector, L2-normalised, with an exact (FLAT) index. C2F re-ranks with it, and
  it is the exact index at the full dimension.
- one vector field per other (scoring, prefix dimension, index kind) of the layout, named
  ``cosine_64_hnsw`` or ``sfs_256_exact``: the prefix L2-normalised (cosine) or
  fragment-normalised (SFS), each with its own index, all by inner product. Milvus indexes a
  field once, so two kinds at one prefix are two fields.

Index kinds map to Milvus index types: ``exact`` → FLAT, ``hnsw`` → :attr:`MilvusParams.ann_index`
(HNSW by default; HNSW_SQ, IVF_FLAT, IVF_SQ8 as settings), ``pq`` → IVF_PQ where the server
builds it. milvus-lite accepts an IVF_PQ index but searches such a field by brute force (it logs
that it cannot build one), so against milvus-lite the kind is refused when the collection opens.

Routes: coarse and fine are single-field searches; C2F shortlists ``k × factor`` on the
shortlist prefix's field, the search returning each shortlisted document's ``full`` vector with
it, and re-ranks them exactly here (one request and one consistent read per query batch, where
a second request by key would read the rows again); SFS searches its fragment-normalised field.
A filter becomes a Milvus expression over ``filterable`` and is applied inside every search.

Consistency and durability are Milvus's. The collection is created with, and every search and
read asks for, **Strong** consistency: a read sees every write Milvus acknowledged before it,
through any replica. An upsert returns once Milvus acknowledged it. A large upsert is sent in
chunks of :data:`~index.milvus.params.UPSERT_CHUNK` documents, each acknowledged on its own; an
upsert cut short is completed by sending it again (upserts replace by id).

Every call has a deadline; a server that is down or slow is
:class:`~index.backend.BackendUnavailable` (the service answers 503), a collection another
replica dropped is :class:`~index.backend.CollectionMissing`.

The collection is one class, :class:`MilvusCollection`, put together from one module per family
of operations: :mod:`~index.milvus.opening` (the schema, create or check, load),
:mod:`~index.milvus.writing`, :mod:`~index.milvus.filters` (a filter as a Milvus expression) and
:mod:`~index.milvus.searching`, over one :mod:`~index.milvus.connection`.
"""

from __future__ import annotations

from index.milvus.connection import MilvusConnection, list_collections, stored_record
from index.milvus.params import MilvusParams
from index.milvus.writing import Writing

__all__ = [
    "MilvusCollection",
    "MilvusConnection",
    "MilvusParams",
    "list_collections",
    "stored_record",
]


class MilvusCollection(Writing):
    """A Fractal collection in a Milvus server (see the module docstring); implements
    :class:`index.backend.IndexBackend`.

    ``record`` says what the collection is (its Fractal name, the bundle that made its vectors,
    its index kinds); it is stored as a collection property when the collection is created, and
    a collection found with another bundle's record or another layout is refused with
    :class:`ValueError`. With ``create=False`` a missing collection is :class:`CollectionMissing`.
    """

    searches_now = False
    """A search is a call to the Milvus server: never on the service's event loop."""

    def snapshot(self) -> int:
        """Nothing to do: Milvus persists and recovers its own indexes."""
        return 0

    def close(self) -> None:
        """Nothing to release: the collection stays loaded for the other replicas, and the
        connection is the service's (:meth:`MilvusConnection.close`)."""

    def drop(self) -> None:
        """Remove the collection and everything in it from Milvus."""
        self._call("drop_collection", lambda c: c.drop_collection(self.name))
