"""The embedded index backend: a collection is the SQLite store of record plus FAISS indexes
per resolution, in one folder, kept in step.

For every served prefix dimension and every kind its layout names there is one cosine index
(the prefix, L2-normalised) and, when ``fragment_dim`` is set, one SFS index (see
:mod:`index.fragments`). By default every prefix gets every kind; a ``layout`` builds only the
kinds a user serves at each prefix (e.g. an HNSW graph at the C2F shortlist prefix and nothing at
256-d, where fine queries are answered by C2F). All indexes, and the memory-mapped file of full
unit vectors that C2F re-ranks with (:mod:`index.embedded.vector_file`), are derived from the store:

- a write commits to SQLite first and only then updates the indexes, so an acknowledged write is
  never lost; on open, the indexes come from the last snapshot, caught up with the store's change
  log, or are rebuilt from the store when the snapshot cannot be used.
- searches share a readers-writer lock. Writes are serialised by a separate mutex, do their
  validation, normalisation and SQLite commit without the readers-writer lock, and take it
  exclusively only for one chunk of one index at a time, so a search waits for at most one such
  step, never for a whole batch. Rebuilds (HNSW compaction, PQ training) are built beside the live
  index and swapped in.

Searches take an optional metadata filter (:mod:`index.filters`, ``where=``), applied inside the
search on every route, so that ``k`` hits come back whenever ``k`` documents match:

- the store lists the matching rows from its metadata index (:meth:`Store.rows_matching`); the
  result is cached per filter until the next write;
- few matches (at most :meth:`FilterParams.exact_subset_rows`, which grows like ``N^(1/3)``):
  **exact subset**, i.e. exact scores of just those rows, from the memory-mapped full vectors
  (cut to the route's prefix, or fragment-normalised for SFS; C2F scores them at the full
  dimension directly);
- more: the index itself (:meth:`VectorIndex.search_filtered`): an HNSW graph walks with the
  rows as an ``IDSelectorBitmap`` (**selector**) and efSearch raised by
  :meth:`FilterParams.hnsw_ef`; an exact or PQ index scans every vector and keeps the matching
  ones (**scan**). A query that still finds fewer than ``k`` matching rows is answered by the
  exact subset. C2F shortlists ``k × factor`` matching rows this way and re-ranks only them.

A search's hits are named from an in-memory table of the ids of the rows the indexes hold
(:mod:`index.embedded.row_names`, loaded at open and kept in step under the same lock), or, when
their text and metadata are asked for, from one store query that reads all three.

A search returns a :class:`~index.types.SearchResult`: the hits, the seconds of each step, and
for a filtered search how the filter was applied (:class:`~index.types.Filtering`): ``mode``
(``exact_subset``, ``selector`` or ``scan``), ``matching`` (rows the filter matched),
``resolve_seconds``, and for the index paths ``ef_search`` (HNSW) and ``fallback`` (the
positions of the queries the exact subset answered instead).

The collection is one class, :class:`Collection`, put together from one module per family of
operations: :mod:`~index.embedded.opening` (open and recover), :mod:`~index.embedded.writing`,
:mod:`~index.embedded.filter_plan` (filter planning), :mod:`~index.embedded.searching` and
:mod:`~index.embedded.snapshot`, over the attributes of :mod:`~index.embedded.state`.
"""

from __future__ import annotations

from index.embedded.filter_plan import FilterParams
from index.embedded.opening import Opening
from index.embedded.searching import Searching
from index.embedded.snapshot import Snapshotting
from index.embedded.writing import Writing

__all__ = ["Collection", "FilterParams"]


class Collection(Opening, Writing, Searching, Snapshotting):
    """Documents with full vectors, searchable by cosine or SFS at each served prefix dimension.

    ``path`` is a directory (created if missing) holding ``store.sqlite3``, the full vectors
    (``vectors.f32`` or ``vectors.f16`` with ``vectors.json``) and ``snapshot/``. ``layout`` maps
    a prefix dimension to the index kinds built at it (default: every kind of ``index_kinds`` at
    every one of ``prefix_dims``); ``full_dtype`` is the full vectors' storage, ``float32`` or
    ``float16``; ``store_check`` how the store is checked when opened
    (:data:`index.embedded.store.STORE_CHECKS`).
    """

    def close(self) -> None:
        """Close the store. Nothing needs flushing: every write was committed when it returned."""
        self._store.close()

    def __enter__(self) -> Collection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
