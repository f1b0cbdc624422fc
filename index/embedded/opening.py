"""Opening an embedded collection: its settings checked, the store and the full vectors' file
opened, and every index loaded from the last snapshot and caught up with the store's change
log, or rebuilt from the store where the snapshot cannot be used."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from index.checks import check_count, check_layout
from index.embedded.filter_plan import FilterParams
from index.embedded.row_names import RowNames
from index.embedded.snapshot import LoadedSnapshot, load_snapshot
from index.embedded.state import SCORINGS, CollectionState, IndexSpec
from index.embedded.store import STORE_FILE, ChangeSet, Store
from index.embedded.vector_file import VectorFile
from index.faiss_indexes import KINDS, HnswParams, PqParams, VectorIndex, create_index, read_index
from index.fragments import check_fragment_dim
from index.locking import ReadWriteLock
from index.types import DiskRecovery

CHUNK_ROWS = 50_000
"""Rows read from the full vectors per step of an index build: bounded memory at any size."""
NAMES_CHUNK = 2_000
"""Rows' names read per step at opening: few enough that the Python objects of one step, reused
by the next, leave little memory behind."""
SQ_TRAINING_SAMPLE = 100_000
"""Rows an SQ8 graph built from scratch learns its value ranges from."""


class Opening(CollectionState):
    """Opens the collection (:class:`index.embedded.Collection`'s constructor)."""

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
        self._store = Store(self.path / STORE_FILE, dim, store_check)
        self._lock = ReadWriteLock()
        self._writer = threading.Lock()
        self._vectors = VectorFile(self.path, dim, full_dtype)
        self._count = self._store.count()
        self._indexes = {}
        self._ingest_seconds = {"store": 0.0, "full_vectors": 0.0, "indexes": 0.0}
        self._applied: int | None = 0
        self.filters = filters or FilterParams()
        self._generation = 0  # bumped after every store commit: cached filter rows go stale
        self._filter_cache = OrderedDict()
        self._funnels = {}
        self._filter_cache_lock = threading.Lock()
        self._open_indexes()

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

    def _open_names(self, loaded: LoadedSnapshot, changes: ChangeSet) -> RowNames:
        """The ids of the rows the indexes hold now: the snapshot's, caught up with ``changes``
        (those since its counter) when its indexes were used, else read from the store."""
        names = loaded.names if loaded.indexes else None
        if names is not None:
            names.drop(changes.removed)
            added = self._store.names(changes.added)
            names.add(list(added), [doc_id for doc_id, _ in added.values()])
            return names
        names = RowNames()
        names.reserve(*self._store.names_extent())
        for rows, doc_ids in self._store.iter_names(NAMES_CHUNK):
            names.add(rows, doc_ids)
        return names

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
        replaced = False
        for name, spec in self._specs.items():
            index = loaded.indexes.get(name)
            if index is None:
                assert live is not None
                self._indexes[name] = self._build(spec, live)
                self._indexes[name].seal()  # not published yet: no search runs on it
                continue
            if removed.size:
                index.remove(removed)
            if added.size:
                index.add(added, self._map(spec.scoring, spec.dim, self._vectors.gather(added)))
            fresh = index.replacement()
            replaced = replaced or fresh is not None
            self._indexes[name] = fresh or index
            self._indexes[name].seal()
        self._applied = changes.counter
        self._names = self._open_names(loaded, changes)
        self._recovery = DiskRecovery(
            snapshot_counter=loaded.counter if loaded.indexes else None,
            loaded=sorted(loaded.indexes),
            caught_up_changes=len(changes.added) + len(changes.removed),
            rebuilt=dict(sorted(loaded.problems.items())),
            full_vectors=asdict(vectors_recovery),
        )
        worked = loaded.problems or changes.added or changes.removed or replaced
        self.opened_with_work = bool(self._count and (worked or vectors_recovery.rows_written))
        """Whether opening rebuilt, caught up or replaced indexes (compacted, trained or
        renumbered) over some documents: a snapshot now saves the next start that work (at
        millions of documents, many minutes of graph building)."""
