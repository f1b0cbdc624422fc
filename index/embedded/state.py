"""What every part of an embedded collection shares: its attributes, which index each name
is, and the space each index's vectors live in."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from index.embedded.row_names import RowNames
from index.embedded.store import Store
from index.embedded.vector_file import VectorFile
from index.faiss_indexes import HnswParams, PqParams, VectorIndex
from index.filters import Filter
from index.fragments import in_space
from index.funnel import Funnel
from index.locking import ReadWriteLock
from index.rowset import RowSet
from index.types import DiskRecovery

if TYPE_CHECKING:
    from index.embedded.filter_plan import FilterParams

SCORINGS = ("cosine", "sfs")


@dataclass(frozen=True)
class IndexSpec:
    """Which index: scoring (``cosine`` or ``sfs``), prefix dimension and kind."""

    scoring: str
    dim: int
    kind: str

    @property
    def name(self) -> str:
        return spec_name(self.scoring, self.dim, self.kind)


def spec_name(scoring: str, dim: int, kind: str) -> str:
    """The name of the index a search asks for (:attr:`IndexSpec.name`), made without a spec."""
    return f"{scoring}-{dim}-{kind}"


class CollectionState:
    """The attributes of :class:`index.embedded.Collection`, set when it opens
    (:class:`index.embedded.opening.Opening`), and the lookups every operation uses."""

    path: Path
    dim: int
    prefix_dims: tuple[int, ...]
    layout: dict[int, tuple[str, ...]]
    index_kinds: tuple[str, ...]
    fragment_dim: int | None
    hnsw: HnswParams
    pq: PqParams
    pq_codebooks: dict[int, np.ndarray]
    filters: FilterParams
    opened_with_work: bool
    _specs: dict[str, IndexSpec]
    _store: Store
    _lock: ReadWriteLock
    _writer: threading.Lock
    _vectors: VectorFile
    _count: int
    _indexes: dict[str, VectorIndex]
    _names: RowNames
    """The string id of every row an index holds: a search's hits are named from it."""
    _recovery: DiskRecovery
    _ingest_seconds: dict[str, float]
    _applied: int | None
    """The store change the indexes reflect; None while a write is updating them."""
    _generation: int
    """Bumped after every store commit: cached filter rows go stale."""
    _filter_cache: OrderedDict[Filter, tuple[int, RowSet]]
    _filter_cache_lock: threading.Lock
    _funnels: dict[str, Funnel]
    """The C2F funnel over each prefix index, remade when the index or the vector file's
    mapping is replaced."""

    def _config(self, spec: IndexSpec) -> dict:
        """Everything that decides an index's contents; a snapshot must match it to be used."""
        config: dict = {"scoring": spec.scoring, "dim": spec.dim, "kind": spec.kind}
        if spec.scoring == "sfs":
            config["fragment_dim"] = self.fragment_dim
        if spec.kind == "hnsw":
            config["params"] = self.hnsw.contents()
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

    def _swap_in_replacements(self, snapshot: bool = False) -> None:
        """Rebuild indexes that are due (outside the lock; the writer mutex is held), with
        ``snapshot`` before writing a snapshot (see ``VectorIndex.replacement``)."""
        for name, index in list(self._indexes.items()):
            fresh = index.replacement(snapshot)
            if fresh is not None:
                fresh.seal()  # not published yet: no search runs on it
                with self._lock.write():
                    self._indexes[name] = fresh

    def _funnel(self, spec: IndexSpec) -> Funnel:
        """The funnel from ``spec``'s index to the full vectors (the vector file is mapped:
        called with rows present, under the read lock)."""
        index, refine = self._indexes[spec.name], self._vectors.refine
        assert refine is not None
        funnel = self._funnels.get(spec.name)
        if funnel is None or funnel.base is not index or funnel.refine is not refine:
            funnel = Funnel(index, spec.dim, refine, self.hnsw.native_walk)
            self._funnels[spec.name] = funnel  # concurrent readers may both make one: either does
        return funnel

    def _map(self, scoring: str, dim: int, matrix: np.ndarray) -> np.ndarray:
        """Vectors (full or already cut to ``dim``) in the space of a ``scoring`` index."""
        return in_space(scoring, dim, matrix, self.fragment_dim)

    def _spec(self, scoring: str, dim: int, kind: str) -> IndexSpec:
        spec = self._specs.get(spec_name(scoring, dim, kind))
        if spec is None:
            served = ", ".join(sorted(self._specs))
            raise ValueError(
                f"no {kind!r} index for scoring {scoring!r} at dim {dim!r}; served: {served}"
            )
        return spec
