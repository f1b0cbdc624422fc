"""A collection: the SQLite store of record plus FAISS indexes per resolution, kept in step.

For every served prefix dimension and every kind its layout names there is one cosine index
(the prefix, L2-normalised) and, when ``fragment_dim`` is set, one SFS index (see
:mod:`index.fragments`). By default every prefix gets every kind; a ``layout`` builds only the
kinds a user serves at each prefix (e.g. an HNSW graph at the C2F shortlist prefix and nothing at
256-d, where fine queries are answered by C2F). All indexes, and the memory-mapped file of full
unit vectors that C2F re-ranks with (:mod:`index.vector_file`), are derived from the store:

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

A search returns a :class:`~index.types.SearchResult`: the hits, the seconds of each step, and
for a filtered search how the filter was applied (:class:`~index.types.Filtering`): ``mode``
(``exact_subset``, ``selector`` or ``scan``), ``matching`` (rows the filter matched),
``resolve_seconds``, and for the index paths ``ef_search`` (HNSW) and ``fallback`` (the
positions of the queries the exact subset answered instead).
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from index.filters import Filter
from index.fragments import check_fragment_dim, in_space
from index.kinds import (
    KINDS,
    HnswIndex,
    HnswParams,
    PqParams,
    VectorIndex,
    create_index,
    read_index,
)
from index.locking import ReadWriteLock
from index.rerank import rerank
from index.rowset import RowSet
from index.snapshot import load_snapshot, write_snapshot
from index.store import ChangeSet, Contents, Document, Store
from index.types import CollectionStats, Filtering, Hit, IndexStats, SearchResult, Timings
from index.vector_file import VectorFile
from index.vectors import as_matrix, prefix_unit, unit_rows

SCORINGS = ("cosine", "sfs")
CHUNK = 256
"""Documents added to an index per hold of the exclusive lock."""
CHUNK_ROWS = 50_000
"""Rows read from the full vectors per step of an index build: bounded memory at any size."""
SQ_TRAINING_SAMPLE = 100_000
"""Rows an SQ8 graph built from scratch learns its value ranges from."""


@dataclass(frozen=True)
class FilterParams:
    """How a filtered search chooses its path (see the module docstring). ``N`` is the number of
    documents, ``m`` how many the filter matches, ``s = m / N`` its selectivity.

    - HNSW: the graph walk's efSearch is ``ef / √s`` (at most ``hnsw_ef_max``). The walk scores
      every node it visits but keeps only selected ones, so it must go deeper the fewer match;
      measured on 200K real-like 64-d vectors (efSearch 128 unfiltered: recall@10 0.989), this
      keeps filtered recall@10 at 0.99-1.00 from s = 50% down to 0.5%, where a fixed ``ef · k /
      s`` rule overshoots (efSearch 10,000 at 0.1%) and a fixed efSearch falls to 0.74 at 1%.
    - The exact subset costs a fixed time per matching row (gathering it from the vector file),
      the walk about ``ef / √s = ef · √(N / m)``: they cross where ``m^1.5`` is proportional to
      ``ef · √N``, i.e. at ``m = exact_subset_scale · N^(1/3)``. Below it the exact subset
      answers. Measured (one thread, 64-d prefix of 256-d vectors): at N = 200K the exact subset
      takes 0.35 ms for 4K rows and 0.86 ms for 10K, the walk 1.8 ms at s = 2% and 0.9 ms at
      10%, crossing near 14K rows; ``python -m benchmarks filters`` measures both paths at 1M
      (README "Filters").
    - ``cache_bytes``: resolved filters (row ids and bitmaps) kept until the next write.
    """

    exact_subset_scale: float = 200.0
    hnsw_ef_max: int = 4_096
    cache_bytes: int = 64 << 20

    def exact_subset_rows(self, documents: int) -> int:
        """At most this many matching rows are scored exactly instead of searched."""
        return int(self.exact_subset_scale * documents ** (1 / 3))

    def hnsw_ef(self, ef_search: int, documents: int, matches: int) -> int:
        """The efSearch of a filtered graph walk."""
        raised = math.ceil(ef_search * math.sqrt(documents / max(matches, 1)))
        return max(ef_search, min(raised, self.hnsw_ef_max))


@dataclass(frozen=True)
class IndexSpec:
    """Which index: scoring (``cosine`` or ``sfs``), prefix dimension and kind."""

    scoring: str
    dim: int
    kind: str

    @property
    def name(self) -> str:
        return f"{self.scoring}-{self.dim}-{self.kind}"


def check_layout(
    layout: Mapping[int, Sequence[str]], prefix_dims: Sequence[int]
) -> dict[int, tuple[str, ...]]:
    """``layout`` in canonical form (dims ascending, kinds in :data:`KINDS` order), or
    :class:`ValueError` for a dim that is not served or a kind that does not exist."""
    checked: dict[int, tuple[str, ...]] = {}
    for prefix_dim, kinds in sorted(layout.items()):
        if prefix_dim not in prefix_dims:
            raise ValueError(
                f"the index layout names dim {prefix_dim}, which is not a served prefix "
                f"({', '.join(map(str, prefix_dims))})"
            )
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown or len(set(kinds)) != len(kinds):
            raise ValueError(
                f"the index layout at dim {prefix_dim} must list some of {', '.join(KINDS)}, "
                f"each once; got {list(kinds)}"
            )
        checked[prefix_dim] = tuple(kind for kind in KINDS if kind in kinds)
    return checked


def checked_documents(
    ids: Sequence[str],
    texts: Sequence[str],
    vectors: np.ndarray,
    metadata: Sequence[dict] | None,
    dim: int,
) -> tuple[list[Document], np.ndarray]:
    """An upsert's documents, checked (:class:`ValueError` otherwise), and their full vectors
    as one ``(n, dim)`` matrix (:func:`index.vectors.as_matrix`)."""
    if isinstance(ids, str) or isinstance(texts, str):
        raise ValueError("ids and texts must be sequences of strings, not a single string")
    matrix = as_matrix(vectors, (dim,), "vectors")
    metadata = [{} for _ in ids] if metadata is None else list(metadata)
    if not len(ids) == len(texts) == len(metadata) == matrix.shape[0]:
        raise ValueError(
            f"got {len(ids)} ids, {len(texts)} texts, {len(metadata)} metadata and "
            f"{matrix.shape[0]} vectors; they must all be the same length"
        )
    if len(set(ids)) != len(ids):
        raise ValueError("ids must be unique within one upsert")
    documents = [
        Document(id=doc_id, text=text, vector=vector, metadata=meta)
        for doc_id, text, vector, meta in zip(ids, texts, matrix, metadata, strict=True)
    ]
    return documents, matrix


def check_count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


class Collection:
    """Documents with full vectors, searchable by cosine or SFS at each served prefix dimension.

    ``path`` is a directory (created if missing) holding ``store.sqlite3``, the full vectors
    (``vectors.f32`` or ``vectors.f16`` with ``vectors.json``) and ``snapshot/``. ``layout`` maps
    a prefix dimension to the index kinds built at it (default: every kind of ``index_kinds`` at
    every one of ``prefix_dims``); ``full_dtype`` is the full vectors' storage, ``float32`` or
    ``float16``; ``store_check`` how the store is checked when opened
    (:data:`index.store.STORE_CHECKS`).
    """

    def __init__(
        self,
        path: str | Path,
        dim: int,
        prefix_dims: Sequence[int],
        index_kinds: Sequence[str] = ("exact",),
        hnsw: HnswParams | None = None,
        pq: PqParams | None = None,
        fragment_dim: int | None = None,
        pq_codebooks: Mapping[int, np.ndarray] | None = None,
        layout: Mapping[int, Sequence[str]] | None = None,
        full_dtype: str = "float32",
        filters: FilterParams | None = None,
        store_check: str = "quick",
    ) -> None:
        check_count(dim, "dim")
        prefix_dims = tuple(sorted({check_count(d, "every prefix dim") for d in prefix_dims}))
        if not prefix_dims or prefix_dims[-1] > dim:
            raise ValueError(f"prefix_dims must be a non-empty set of dims <= {dim}")
        unknown = set(index_kinds) - set(KINDS)
        if unknown or not index_kinds:
            raise ValueError(
                f"index_kinds must be some of {', '.join(KINDS)}; got {list(index_kinds)}"
            )
        if layout is None:
            layout = {prefix_dim: index_kinds for prefix_dim in prefix_dims}
        self.layout = check_layout(layout, prefix_dims)
        self.hnsw = hnsw or HnswParams()
        self.pq = pq or PqParams()
        # Cosine PQ indexes at these dims use the given centroids instead of training their own.
        self.pq_codebooks = {
            int(d): np.ascontiguousarray(c, dtype=np.float32)
            for d, c in (pq_codebooks or {}).items()
        }
        for prefix_dim, kinds in self.layout.items():
            if "pq" in kinds and prefix_dim not in self.pq_codebooks:
                self.pq.check_dim(prefix_dim)
        if fragment_dim is not None:
            for prefix_dim in prefix_dims:
                check_fragment_dim(prefix_dim, fragment_dim)
        self.path = Path(path)
        self.dim = dim
        self.prefix_dims = prefix_dims
        self.index_kinds = tuple(k for k in KINDS if any(k in v for v in self.layout.values()))
        self.fragment_dim = fragment_dim
        scorings = SCORINGS if fragment_dim is not None else SCORINGS[:1]
        self._specs = {
            spec.name: spec
            for spec in (
                IndexSpec(scoring, prefix_dim, kind)
                for scoring in scorings
                for prefix_dim, kinds in self.layout.items()
                for kind in kinds
            )
        }
        self.path.mkdir(parents=True, exist_ok=True)
        self._store = Store(self.path / "store.sqlite3", dim, store_check)
        self._lock = ReadWriteLock()
        self._writer = threading.Lock()
        self._vectors = VectorFile(self.path, dim, full_dtype)
        self._count = self._store.count()
        self._indexes: dict[str, VectorIndex] = {}
        self._recovery: dict = {}
        self._ingest_seconds = {"store": 0.0, "full_vectors": 0.0, "indexes": 0.0}
        self._applied: int | None = 0
        self.filters = filters or FilterParams()
        self._generation = 0  # bumped after every store commit: cached filter rows go stale
        self._filter_cache: OrderedDict[Filter, tuple[int, RowSet]] = OrderedDict()
        self._filter_cache_lock = threading.Lock()
        self._open_indexes()

    # -- opening ---------------------------------------------------------------------------

    def _config(self, spec: IndexSpec) -> dict:
        """Everything that decides an index's contents; a snapshot must match it to be used."""
        config: dict = {"scoring": spec.scoring, "dim": spec.dim, "kind": spec.kind}
        if spec.scoring == "sfs":
            config["fragment_dim"] = self.fragment_dim
        if spec.kind == "hnsw":  # efSearch is read at search time: it decides no contents
            config["params"] = {k: v for k, v in asdict(self.hnsw).items() if k != "ef_search"}
        if spec.kind == "pq":
            config["params"] = asdict(self.pq)
            codebooks = self._codebooks(spec)
            if codebooks is not None:
                config["codebooks_sha256"] = hashlib.sha256(codebooks.tobytes()).hexdigest()
        return config

    def _codebooks(self, spec: IndexSpec) -> np.ndarray | None:
        """The given PQ centroids for a cosine PQ index at ``spec.dim``, if any."""
        if spec.kind != "pq" or spec.scoring != "cosine":
            return None
        return self.pq_codebooks.get(spec.dim)

    def _map(self, scoring: str, dim: int, matrix: np.ndarray) -> np.ndarray:
        """Vectors (full or already cut to ``dim``) in the space of a ``scoring`` index."""
        return in_space(scoring, dim, matrix, self.fragment_dim)

    def _build(self, spec: IndexSpec, rows: np.ndarray) -> VectorIndex:
        """A new index of ``spec`` over ``rows`` (every present row), filled chunk by chunk. An
        SQ8 graph over enough rows learns its ranges from a sample of them first."""
        training = None
        if spec.kind == "hnsw" and len(rows) >= self.hnsw.sq_train_size:
            sample = np.random.default_rng(0).choice(
                len(rows), min(len(rows), SQ_TRAINING_SAMPLE), replace=False
            )
            rows_sample = np.sort(rows[sample])
            training = self._map(spec.scoring, spec.dim, self._vectors.gather(rows_sample))
        index = create_index(
            spec.kind, spec.dim, self.hnsw, self.pq, self._codebooks(spec), training
        )
        for start in range(0, len(rows), CHUNK_ROWS):
            chunk = rows[start : start + CHUNK_ROWS]
            index.add(chunk, self._map(spec.scoring, spec.dim, self._vectors.gather(chunk)))
        return index.replacement() or index

    def _open_indexes(self) -> None:
        vectors_recovery = self._vectors.open(self._store)
        configs = {name: self._config(spec) for name, spec in self._specs.items()}

        def open_index(name: str, path: Path) -> VectorIndex:
            spec = self._specs[name]
            return read_index(spec.kind, spec.dim, path, self.hnsw, self.pq, self._codebooks(spec))

        loaded = load_snapshot(self.path / "snapshot", self._store, configs, open_index)
        if loaded.indexes:
            changes = self._store.changes_since(loaded.counter)
        else:
            changes = ChangeSet((), (), self._store.counter)
        added = np.array(changes.added, dtype=np.int64)
        removed = np.array(changes.removed, dtype=np.int64)
        live = self._store.live_row_ids() if len(loaded.indexes) < len(self._specs) else None
        for name, spec in self._specs.items():
            index = loaded.indexes.get(name)
            if index is None:
                assert live is not None
                self._indexes[name] = self._build(spec, live)
                continue
            if removed.size:
                index.remove(removed)
            if added.size:
                index.add(added, self._map(spec.scoring, spec.dim, self._vectors.gather(added)))
            self._indexes[name] = index.replacement() or index
        self._applied = changes.counter
        self._recovery = {
            "snapshot_counter": loaded.counter if loaded.indexes else None,
            "loaded": sorted(loaded.indexes),
            "caught_up_changes": len(changes.added) + len(changes.removed),
            "rebuilt": dict(sorted(loaded.problems.items())),
            "full_vectors": asdict(vectors_recovery),
        }
        worked = loaded.problems or changes.added or changes.removed
        self.opened_with_work = bool(self._count and (worked or vectors_recovery.rows_written))
        """Whether opening rebuilt or caught up indexes over some documents: a snapshot now saves
        the next start that work (at millions of documents, many minutes of graph building)."""

    # -- writing ---------------------------------------------------------------------------

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
            for start in range(0, len(rows), CHUNK):
                chunk = slice(start, start + CHUNK)
                old = np.array(
                    [row for row in upserted.replaced[chunk] if row is not None], np.int64
                )
                started = time.perf_counter()
                with self._lock.write():
                    self._vectors.write(rows[chunk], unit[chunk])
                    self._count += len(rows[chunk]) - len(old)
                written = time.perf_counter()
                for name, spec in self._specs.items():
                    with self._lock.write():
                        index = self._indexes[name]
                        if old.size:
                            index.remove(old)
                        index.add(rows[chunk], mapped[spec.scoring, spec.dim][chunk])
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
                    self._count -= len(rows)
                self._swap_in_replacements()
            self._applied = deleted.counter
        return len(rows)

    def _swap_in_replacements(self) -> None:
        """Rebuild indexes that are due (outside the lock; the writer mutex is held)."""
        for name, index in list(self._indexes.items()):
            fresh = index.replacement()
            if fresh is not None:
                with self._lock.write():
                    self._indexes[name] = fresh

    # -- reading ---------------------------------------------------------------------------

    def get(self, doc_id: str) -> Document | None:
        """The stored document (its vector as it was given), or None."""
        return self._store.get(doc_id)

    def contents_of(self, doc_ids: Sequence[str]) -> list[Contents | None]:
        """The stored text and metadata in the order of ``doc_ids`` (None where there is no such
        document), read with one query and without the vectors."""
        return self._store.contents_of(doc_ids)

    def present(self, doc_ids: Sequence[str]) -> set[str]:
        """Which of these ids are stored (one query, no text, metadata or vector read)."""
        return self._store.present(doc_ids)

    def _spec(self, scoring: str, dim: int, kind: str) -> IndexSpec:
        spec = self._specs.get(IndexSpec(scoring, dim, kind).name)
        if spec is None:
            served = ", ".join(sorted(self._specs))
            raise ValueError(
                f"no {kind!r} index for scoring {scoring!r} at dim {dim!r}; served: {served}"
            )
        return spec

    def _hits(self, scores: np.ndarray, rows: np.ndarray) -> list[list[Hit]]:
        """Hits per query from FAISS's ``(queries, k)`` score and row matrices, with the string
        ids of every query's rows read in one store query (a row removed from the store whose
        removal the indexes have not applied yet is still named: the search saw that state).
        Called under the read lock, so the ids are those of the state the search saw."""
        found = rows >= 0
        doc_ids = iter(self._store.doc_ids_of(rows[found].tolist()))
        named = np.full(rows.shape, None, dtype=object)
        named[found] = [next(doc_ids) for _ in range(int(found.sum()))]
        return [
            [
                Hit(doc_id, float(score))
                for score, doc_id in zip(query_scores, query_ids, strict=True)
                if doc_id is not None
            ]
            for query_scores, query_ids in zip(scores, named, strict=True)
        ]

    def rows_matching(self, where: Filter) -> RowSet:
        """The rows of the documents that match ``where``, from the store's metadata index;
        cached per filter until the next write (the cache holds at most
        ``filters.cache_bytes``)."""
        generation = self._generation  # read first: a write meanwhile makes the entry stale
        with self._filter_cache_lock:
            cached = self._filter_cache.get(where)
            if cached is not None and cached[0] == generation:
                self._filter_cache.move_to_end(where)
                return cached[1]
        allowed = RowSet(self._store.rows_matching(where))
        with self._filter_cache_lock:
            self._filter_cache[where] = (generation, allowed)
            total = sum(entry.nbytes for _, entry in self._filter_cache.values())
            while total > self.filters.cache_bytes and len(self._filter_cache) > 1:
                _, (_, evicted) = self._filter_cache.popitem(last=False)
                total -= evicted.nbytes
        return allowed

    def clear_filter_cache(self) -> None:
        """Forget every resolved filter (the next search with one lists its rows again)."""
        with self._filter_cache_lock:
            self._filter_cache.clear()

    def _resolve(self, where: Filter | None) -> tuple[Filtering | None, RowSet | None]:
        """The filter report and the rows ``where`` allows; (None, None) without a filter."""
        if where is None:
            return None, None
        started = time.perf_counter()
        allowed = self.rows_matching(where)
        filtering: Filtering = {
            "resolve_seconds": time.perf_counter() - started,
            "matching": len(allowed),
        }
        return filtering, allowed

    def _exact_subset(
        self, queries: np.ndarray, k: int, rows: np.ndarray, space: tuple[str, int] | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-``k`` of ``queries`` (already in the space) over ``rows``, scored from the
        full vectors mapped to ``space`` (``(scoring, dim)``; None: the full unit vectors),
        ``CHUNK_ROWS`` rows at a time. Rows not yet in the vector file (an upsert still
        writing) are left out. Called under the read lock."""
        rows = rows[: int(np.searchsorted(rows, self._vectors.written_rows))]
        best_scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
        best_rows = np.full((len(queries), k), -1, dtype=np.int64)
        for start in range(0, len(rows), CHUNK_ROWS):
            chunk = rows[start : start + CHUNK_ROWS]
            if space is None:
                vectors = self._vectors.gather(chunk)
            else:
                vectors = self._map(*space, self._vectors.gather(chunk, space[1]))
            scores = np.concatenate([best_scores, queries @ vectors.T], axis=1)
            candidates = np.concatenate([best_rows, np.broadcast_to(chunk, scores[:, k:].shape)], 1)
            keep = min(k, scores.shape[1])
            top = np.argpartition(-scores, keep - 1, axis=1)[:, :keep]
            best_scores = np.take_along_axis(scores, top, 1)
            best_rows = np.take_along_axis(candidates, top, 1)
        order = np.argsort(-best_scores, axis=1, kind="stable")
        best_scores = np.take_along_axis(best_scores, order, 1)
        best_rows = np.take_along_axis(best_rows, order, 1)
        best_rows[~np.isfinite(best_scores)] = -1
        return best_scores, best_rows

    def _filtered(
        self,
        spec: IndexSpec,
        queries: np.ndarray,
        k: int,
        allowed: RowSet,
        ef_search: int | None,
        filtering: Filtering,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Search ``spec``'s index for ``queries`` (in its space) among ``allowed``: the exact
        subset when few rows match, else the index with a selector, falling back to the exact
        subset for a query that found fewer than ``min(k, matches)``. Under the read lock."""
        index = self._indexes[spec.name]
        space = (spec.scoring, spec.dim)
        documents = max(self._count, 1)
        report: Filtering = {"matching": len(allowed)}
        if len(allowed) <= self.filters.exact_subset_rows(documents):
            report["mode"] = "exact_subset"
            scores, rows = self._exact_subset(queries, k, allowed.rows, space)
        else:
            report["mode"] = index.filter_mode
            if isinstance(index, HnswIndex):
                base = index.params.ef_search if ef_search is None else ef_search
                ef_search = self.filters.hnsw_ef(base, documents, len(allowed))
                report["ef_search"] = ef_search
            scores, rows = index.search_filtered(queries, k, allowed, ef_search)
            short = np.flatnonzero((rows >= 0).sum(axis=1) < min(k, len(allowed)))
            report["fallback"] = short.tolist()
            if len(short):
                scores[short], rows[short] = self._exact_subset(
                    queries[short], k, allowed.rows, space
                )
        filtering.update(report)
        return scores, rows

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
    ) -> SearchResult:
        """The ``k`` best documents for each query, best first, from one index.

        Queries may be full vectors or already cut to ``dim``; either way they are cut and
        normalised here. Scores are cosines of the ``dim`` prefixes, or with ``scoring="sfs"``
        mean fragment cosines. ``ef_search`` overrides the HNSW beam width for this search.
        ``where`` keeps only documents whose metadata match it (see the module docstring); the
        result's ``filtering`` says how it was applied. Its ``timings["search"]`` is the seconds
        of the index work (listing a filter's rows and reading the hits' ids aside).
        """
        spec = self._spec(scoring, dim, kind)
        k = check_count(k, "k")
        queries = as_matrix(query_vectors, sorted({dim, self.dim}), "query_vectors")
        mapped = self._map(scoring, dim, queries)
        timings: Timings = {}
        filtering, allowed = self._resolve(where)
        with self._lock.read():
            k = min(k, max(self._count, 1))  # FAISS allocates n * k results
            started = time.perf_counter()
            if allowed is None:
                scores, rows = self._indexes[spec.name].search(mapped, k, ef_search)
            elif not len(allowed):
                return SearchResult([[] for _ in mapped], timings, filtering)
            else:
                assert filtering is not None
                scores, rows = self._filtered(spec, mapped, k, allowed, ef_search, filtering)
            timings["search"] = time.perf_counter() - started
            return SearchResult(self._hits(scores, rows), timings, filtering)

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
    ) -> SearchResult:
        """Coarse-to-fine: shortlist ``k * factor`` by cosine at the ``shortlist_dim`` prefix
        with its ``kind`` index, then re-rank the shortlist exactly by full-dimension cosine
        (:func:`index.rerank.rerank`) and keep ``k``. The prefix needs an index of that kind
        (:class:`ValueError` otherwise); at the full dimension itself this is plain search there
        with exact scores.

        The result's ``timings`` holds the seconds of the ``"shortlist"`` and ``"rerank"``
        steps. ``ef_search`` overrides the HNSW beam width of the shortlist search (at least the
        shortlist's size is sensible). With ``where``, the shortlist holds only matching
        documents (and so does the re-rank); when few match, they are all scored at the full
        dimension, with no shortlist (only ``"rerank"`` is timed)."""
        spec = self._spec("cosine", shortlist_dim, kind)
        k = check_count(k, "k")
        shortlist = k * check_count(factor, "factor")
        queries = as_matrix(query_vectors, (self.dim,), "query_vectors")
        prefix = prefix_unit(queries, shortlist_dim)
        full = unit_rows(queries)
        timings: Timings = {}
        filtering, allowed = self._resolve(where)
        with self._lock.read():
            if allowed is not None and not len(allowed):
                return SearchResult([[] for _ in full], timings, filtering)
            shortlist = min(shortlist, max(self._count, 1))
            started = time.perf_counter()
            if allowed is None:
                _, candidates = self._indexes[spec.name].search(prefix, shortlist, ef_search)
            elif len(allowed) <= self.filters.exact_subset_rows(max(self._count, 1)):
                # Few matches: score them all at the full dimension; nothing to re-rank.
                assert filtering is not None
                best_scores, best_rows = self._exact_subset(full, k, allowed.rows, None)
                filtering.update({"mode": "exact_subset", "matching": len(allowed)})
                timings["rerank"] = time.perf_counter() - started
                return SearchResult(self._hits(best_scores, best_rows), timings, filtering)
            else:
                assert filtering is not None
                _, candidates = self._filtered(
                    spec, prefix, shortlist, allowed, ef_search, filtering
                )
            shortlisted = time.perf_counter()
            kept = [rows[rows >= 0] for rows in candidates]
            best_scores, positions = rerank(full, (self._vectors.gather(r) for r in kept), k)
            best_rows = np.full(positions.shape, -1, dtype=np.int64)
            for i, (rows, best) in enumerate(zip(kept, positions, strict=True)):
                found = best >= 0
                best_rows[i, found] = rows[best[found]]
            timings["shortlist"] = shortlisted - started
            timings["rerank"] = time.perf_counter() - shortlisted
            return SearchResult(self._hits(best_scores, best_rows), timings, filtering)

    def stats(self) -> CollectionStats:
        """Document count, change counter, per-index sizes and state, and how opening went."""
        with self._lock.read():
            return CollectionStats(
                documents=self._count,
                dim=self.dim,
                prefix_dims=list(self.prefix_dims),
                fragment_dim=self.fragment_dim,
                change_counter=self._applied,
                indexes={
                    name: IndexStats.of(spec.scoring, self._indexes[name].stats())
                    for name, spec in self._specs.items()
                },
                recovery=self._recovery,
                full_vectors=self._vectors.stats(),
                ingest_seconds=dict(self._ingest_seconds),
            )

    # -- persistence -----------------------------------------------------------------------

    def snapshot(self) -> int:
        """Write every index to ``path/snapshot`` and return the change counter it reflects.

        Searches go on meanwhile; writes wait. The change log up to that counter is then pruned.
        """
        with self._writer:
            if self._applied is None:
                raise RuntimeError(
                    "an earlier write failed while updating the indexes, so they match no state "
                    "of the store; reopen the collection to rebuild them"
                )
            entries = {
                name: (self._config(spec), self._indexes[name])
                for name, spec in self._specs.items()
            }
            write_snapshot(self.path / "snapshot", self._applied, self._store.store_id, entries)
            with self._lock.read():  # writes wait for the writer mutex; searches only read
                self._vectors.save(self._applied, self._store.store_id)
            self._store.prune_changes(self._applied)
            return self._applied

    def close(self) -> None:
        """Close the store. Nothing needs flushing: every write was committed when it returned."""
        self._store.close()

    def __enter__(self) -> Collection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
