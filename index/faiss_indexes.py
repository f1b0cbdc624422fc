"""The FAISS index wrappers, one per kind: ``exact``, ``hnsw`` and ``pq``, all inner product over
unit vectors.

Each kind wraps an ID map so that FAISS ids are the store's row ids (``IndexIDMap2``, whose
reverse map physical removal needs; HNSW, which never removes, the plain ``IndexIDMap``: its
reverse map would cost ~70 bytes per vector). Callers hand in
vectors already mapped to the index's space (cosine or SFS) as float32 ``(n, dim)`` matrices and
int64 ids, and do their own locking: ``search`` may run in several threads at once, ``add`` and
``remove`` need exclusive access, and ``replacement`` only reads (it may run beside searches).

- ``exact``: ``IndexFlatIP``; removal is physical.
- ``hnsw``: an HNSW graph with ``METRIC_INNER_PRODUCT`` over float32 vectors (``IndexHNSWFlat``,
  storage ``flat``) or over scalar-quantised codes (``IndexHNSWSQ``): 8-bit or 4-bit codes of
  each coordinate's learnt range (``sq8``, ``sq4``: a quarter or an eighth of the vector
  bytes), 8-bit codes of one range learnt over all coordinates (``sq8u``: ``sq8``'s bytes,
  decoded with one scale), or FAISS's 4-bit TurboQuant-MSE codes (``tq4``: ``sq4``'s bytes, with
  levels computed for the coordinates of unit vectors rather than learnt). Every coded storage
  switches at the same point: until ``sq_train_size`` vectors exist the graph stores float32
  (``stats`` says ``"trained": False``) and :meth:`HnswIndex.replacement` then trains on every
  vector present and builds the coded graph.
  HNSW cannot remove a node, so a removed id becomes a tombstone: it stays in the graph (still
  useful for navigating) and searches exclude it with an ``IDSelector`` inside the graph walk, so a
  search still returns ``k`` live results without over-fetching. Once tombstones pass
  ``max_deleted_fraction`` of the graph, :meth:`HnswIndex.replacement` builds a fresh graph from
  the live vectors. From ``locality_from`` nodes on, the graph's nodes are kept numbered for
  locality (:mod:`index.graph_order`: a walk at a million nodes then reads from far fewer places):
  :meth:`HnswIndex.replacement` renumbers a copy of the graph once it reaches that size, and
  again whenever it has grown by ``LOCALITY_GROWTH`` since (nodes added in between are appended
  in row order), so the renumbering costs a few passes over the graph per growth step. Before a
  snapshot the step is ``SNAPSHOT_GROWTH``: the graph an import ends with is written, and
  searched, with at most a small tail out of order.
- ``pq``: ``IndexPQ`` (``m`` sub-quantizers of ``nbits`` bits each). A codebook needs training
  data, so until ``train_size`` vectors exist the index is an exact flat index (``stats`` says
  ``"trained": False``); :meth:`PqIndex.replacement` then trains once on every vector present and
  re-encodes them. Removal is physical. Given ``codebooks`` (``[m, 2^nbits, dim / m]``, e.g. an
  MSHC bundle's), the index is trained from the start with exactly those centroids.

Every kind's ``stats`` says how many bytes one vector's code takes (``bytes_per_vector``):
``4 · dim`` for float32 storage, ``dim`` for either 8-bit code, ``dim / 2`` for SQ4 and TQ4, the PQ
code size once trained.

Filtered search (:meth:`VectorIndex.search_filtered`) returns only rows of a
:class:`index.rowset.RowSet`: ``hnsw`` walks the graph with an ``IDSelectorBitmap`` in its
``SearchParametersHNSW`` (every node still guides the walk, only selected ones become results)
and the efSearch the caller asks for, which the collection raises as the filter gets more
selective (``filter_mode`` ``selector``); ``exact`` and ``pq`` scan every vector, fetching more
than ``k`` and keeping the selected ones, more again while a query has fewer than ``k`` of them,
so their answer is that of an exhaustive filtered scan (``filter_mode`` ``scan``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar, cast

import faiss
import numpy as np

from index import native_funnel, packed_links
from index.graph_order import reordered
from index.packed_links import PackedLinks
from index.rowset import RowSet

KINDS = ("exact", "hnsw", "pq")
SQ_QUANTIZERS = {
    "sq8": faiss.ScalarQuantizer.QT_8bit,
    "sq8u": faiss.ScalarQuantizer.QT_8bit_uniform,
    "sq4": faiss.ScalarQuantizer.QT_4bit,
    "tq4": faiss.ScalarQuantizer.QT_4bit_tqmse,
}
"""The coded HNSW storages and the FAISS scalar quantizer of each."""
HNSW_STORAGES = ("flat", *SQ_QUANTIZERS)
LOCALITY_GROWTH = 1.25
"""A graph in locality order is renumbered again once it holds this many times the nodes it held
when last renumbered."""
SNAPSHOT_GROWTH = 1.02
"""The same, before a snapshot is written."""


@dataclass(frozen=True)
class HnswParams:
    """Graph degree ``m``, build and search beam widths, the tombstone rebuild threshold, how
    the graph stores vectors (``flat`` float32, or ``sq8``, ``sq8u``, ``sq4`` or ``tq4`` codes,
    trained once ``sq_train_size`` vectors exist), the size from which its nodes are kept
    numbered for locality (``locality_from``; see the module docstring), whether the C2F
    funnel and the graph's own search walk a float32 or 8-bit graph natively (``native_walk``,
    :mod:`index.native_funnel`; else through FAISS, with the same answers), and whether a
    natively walked graph keeps its links packed while it is only read (``packed_links``,
    :meth:`HnswIndex.seal`)."""

    m: int = 32
    ef_construction: int = 200
    ef_search: int = 128
    max_deleted_fraction: float = 0.2
    storage: str = "flat"
    sq_train_size: int = 10_000
    locality_from: int = 50_000
    native_walk: bool = True
    packed_links: bool = True

    def __post_init__(self) -> None:
        sizes = (self.m, self.ef_construction, self.ef_search, self.sq_train_size)
        if min(*sizes, self.locality_from) < 1:
            raise ValueError(
                "HNSW m, ef_construction, ef_search, sq_train_size and locality_from must be "
                f">= 1, got {self}"
            )
        if self.storage not in HNSW_STORAGES:
            raise ValueError(
                f"HNSW storage must be one of {', '.join(HNSW_STORAGES)}, got {self.storage!r}"
            )
        if not 0.0 < self.max_deleted_fraction < 1.0:
            raise ValueError(
                f"HNSW max_deleted_fraction must be in (0, 1), got {self.max_deleted_fraction}"
            )

    def contents(self) -> dict:
        """The fields that decide what the graph holds: not ``ef_search``, ``native_walk`` nor
        ``packed_links`` (read at search time and at opening; the saved graph is FAISS's either
        way), nor ``locality_from`` (it only renumbers nodes; searches return the same)."""
        searching = ("ef_search", "locality_from", "native_walk", "packed_links")
        return {k: v for k, v in asdict(self).items() if k not in searching}


@dataclass(frozen=True)
class PqParams:
    """``m`` sub-quantizers of ``nbits`` bits; train once ``train_size`` vectors exist.

    ``min_train`` defaults to 39 vectors per centroid, the least FAISS's k-means accepts without
    a warning.
    """

    m: int = 16
    nbits: int = 8
    min_train: int | None = None

    def __post_init__(self) -> None:
        if self.m < 1 or not 1 <= self.nbits <= 16:
            raise ValueError(f"PQ needs m >= 1 and 1 <= nbits <= 16, got {self}")
        if self.min_train is not None and self.min_train < 2**self.nbits:
            raise ValueError(
                f"PQ min_train must be at least 2**nbits = {2**self.nbits} (one vector per "
                f"centroid), got {self.min_train}"
            )

    @property
    def train_size(self) -> int:
        return self.min_train if self.min_train is not None else 39 * 2**self.nbits

    def check_dim(self, dim: int) -> None:
        """Raise :class:`ValueError` unless ``m`` divides ``dim``."""
        if dim % self.m:
            raise ValueError(f"PQ m={self.m} sub-quantizers must divide the dimension {dim}")


def pq_from_codebooks(codebooks: np.ndarray) -> faiss.IndexPQ:
    """A trained inner-product ``IndexPQ`` whose sub-centroids are ``codebooks``
    (``[m, 2^nbits, dsub]`` float32); :class:`ValueError` for any other shape."""
    array = np.ascontiguousarray(codebooks, dtype=np.float32)
    if array.ndim != 3 or array.shape[1] < 2 or array.shape[1] & (array.shape[1] - 1):
        raise ValueError(f"PQ codebooks must be [m, 2^nbits, dsub], got shape {array.shape}")
    m, centroids, dsub = array.shape
    index = faiss.IndexPQ(m * dsub, m, centroids.bit_length() - 1, faiss.METRIC_INNER_PRODUCT)
    faiss.copy_array_to_vector(array.ravel(), index.pq.centroids)
    index.is_trained = True
    return index


def _flat_contents(index: faiss.IndexIDMap) -> tuple[np.ndarray, np.ndarray]:
    """The ids and stored vectors of an ID-mapped ``IndexFlat`` or HNSW graph (SQ codes come
    back decoded)."""
    inner = faiss.downcast_index(index.index)
    ids = faiss.vector_to_array(index.id_map).astype(np.int64)
    if isinstance(inner, faiss.IndexHNSWSQ):
        return ids, inner.storage.reconstruct_n(0, inner.ntotal)
    if isinstance(inner, faiss.IndexHNSWFlat):
        inner = faiss.downcast_index(inner.storage)
    codes = inner.codes  # type: ignore[attr-defined]  # downcast to an IndexFlat
    vectors = faiss.vector_to_array(codes).view(np.float32).reshape(-1, index.d)
    return ids, vectors


def _select_columns(
    scores: np.ndarray, ids: np.ndarray, keep: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the first ``k`` entries where ``keep`` holds (order kept), padded with -1."""
    rank = np.cumsum(keep, axis=1) - 1
    take = keep & (rank < k)
    out_scores = np.full((len(ids), k), -np.inf, dtype=np.float32)
    out_ids = np.full((len(ids), k), -1, dtype=np.int64)
    rows, columns = np.nonzero(take)
    out_scores[rows, rank[rows, columns]] = scores[rows, columns]
    out_ids[rows, rank[rows, columns]] = ids[rows, columns]
    return out_scores, out_ids


def _hnsw_graph(dim: int, params: HnswParams, training: np.ndarray | None) -> faiss.IndexHNSW:
    """An empty graph: float32 storage, or SQ codes trained on ``training`` when that is given."""
    if training is None:
        graph = faiss.IndexHNSWFlat(dim, params.m, faiss.METRIC_INNER_PRODUCT)
    else:
        graph = faiss.IndexHNSWSQ(  # type: ignore[assignment]  # both are IndexHNSW
            dim,
            SQ_QUANTIZERS[params.storage],  # type: ignore[arg-type]  # the stubs want the object
            params.m,
            faiss.METRIC_INNER_PRODUCT,
        )
        graph.train(training)
    graph.hnsw.efConstruction = params.ef_construction
    return graph


class VectorIndex:
    """An ID-mapped FAISS inner-product index of one kind and dimension."""

    kind: ClassVar[str]

    def __init__(self, dim: int, index: faiss.IndexIDMap) -> None:
        self.dim = dim
        self._index = index
        self._version = 0
        self._nbytes: tuple[int, int] | None = None

    @property
    def version(self) -> int:
        """Bumped by every change (an add, a removal)."""
        return self._version

    @property
    def faiss_index(self) -> faiss.Index:
        """The ID-mapped FAISS index itself (its ids are row ids), for native pipelines that
        search it (:mod:`index.funnel`); not to be changed through this."""
        return self._index

    def __len__(self) -> int:
        """How many live vectors the index returns from."""
        return int(self._index.ntotal)

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        self._index.add_with_ids(vectors, ids)
        self._version += 1

    def seal(self, exclusive: AbstractContextManager | None = None) -> None:
        """Makes the index lean for reading (only a graph has something to do). No write may run
        meanwhile; searches may, where ``exclusive`` shuts them out (the collection's write
        lock) for the moment it takes to swap what they read (None: an index not published yet)."""

    def remove(self, ids: np.ndarray) -> None:
        """Remove ids that are in the index."""
        self._index.remove_ids(faiss.IDSelectorBatch(ids))
        self._version += 1

    def search(
        self, queries: np.ndarray, k: int, ef_search: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Scores and ids, ``(n, k)`` each, best first; missing results have id -1.
        ``ef_search`` overrides an HNSW graph's beam width for this call (others ignore it)."""
        return self._index.search(queries, k)

    def search_parameters(
        self, ef_search: int | None = None, allowed: RowSet | None = None
    ) -> faiss.SearchParameters | None:
        """This index's own parameters for one search through its ID map (the C2F funnel
        passes them on): None for a kind with none. A kind that filters by scan takes no
        ``allowed`` rows (:class:`ValueError`)."""
        if allowed is not None:
            raise ValueError(f"a {self.kind} index filters by scan, not by a selector")
        return None

    filter_mode: ClassVar[str] = "scan"
    """How :meth:`search_filtered` applies a filter (reported with each filtered search)."""

    def search_filtered(
        self, queries: np.ndarray, k: int, allowed: RowSet, ef_search: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Like :meth:`search`, keeping only the rows in ``allowed``: the exhaustive scan
        (flat or PQ) fetches ``k`` over the filter's share of the index (twice that, plus a
        margin) and keeps the selected rows, and a query left with fewer than ``k`` of them is
        scanned again for four times as many, up to every vector. The scan ranks every vector,
        so this is the exact filtered answer (of the index's scores).

        Not FAISS's ``IDSelector``: a flat scan that tests one is a scalar loop, where the plain
        scan compares several vectors per instruction; with a selector it took 2.5× as long at
        1M (64-d, one query per call), this way about as long as unfiltered
        (``python -m benchmarks filters``). ``IndexPQ`` takes no selector at all."""
        total = len(self)
        wanted = min(k, len(allowed), total)
        share = max(len(allowed), 1) / max(total, 1)
        fetch = min(total, int(2 * k / share) + 16)
        scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
        ids = np.full((len(queries), k), -1, dtype=np.int64)
        pending = np.arange(len(queries))
        while len(pending):
            found_scores, found_ids = self._index.search(queries[pending], max(fetch, 1))
            keep = allowed.contains(found_ids)
            picked_scores, picked_ids = _select_columns(found_scores, found_ids, keep, k)
            scores[pending], ids[pending] = picked_scores, picked_ids
            short = (picked_ids >= 0).sum(axis=1) < wanted
            if fetch >= total:
                break
            pending, fetch = pending[short], min(total, 4 * fetch)
        return scores, ids

    def decoded(self) -> tuple[np.ndarray, np.ndarray]:
        """Every live id and its vector as the index scores it (codes decoded): what a
        brute-force check of this index's answers compares with."""
        return _flat_contents(self._index)

    def replacement(self, snapshot: bool = False) -> VectorIndex | None:
        """A rebuilt index that should take this one's place, or None (the default);
        ``snapshot`` when it is asked for before writing a snapshot."""
        return None

    def nbytes(self) -> int:
        """Size of the serialised FAISS index, recomputed only after a change."""
        cached = self._nbytes
        if cached is None or cached[0] != self._version:
            cached = (self._version, len(faiss.serialize_index(self._index)))
            self._nbytes = cached
        return cached[1]

    def bytes_per_vector(self) -> int:
        """Bytes of one stored vector (float32 unless a subclass compresses)."""
        return 4 * self.dim

    def stats(self) -> dict:
        return {
            "kind": self.kind,
            "dim": self.dim,
            "vectors": len(self),
            "bytes": self.nbytes(),
            "bytes_per_vector": self.bytes_per_vector(),
        }

    def save(self, path: Path) -> list[Path]:
        """Write the index (and any state FAISS does not hold) to new files; return them all."""
        faiss.write_index(self._index, str(path))
        return [path]


class ExactIndex(VectorIndex):
    """Brute-force inner product (``IndexFlatIP``)."""

    kind = "exact"

    def __init__(self, dim: int, index: faiss.IndexIDMap2 | None = None) -> None:
        super().__init__(dim, index or faiss.IndexIDMap2(faiss.IndexFlatIP(dim)))


class HnswIndex(VectorIndex):
    """An HNSW graph with tombstones for removed ids (see the module docstring)."""

    kind = "hnsw"
    filter_mode = "selector"

    def __init__(
        self,
        dim: int,
        params: HnswParams,
        index: faiss.IndexIDMap | None = None,
        deleted: np.ndarray | None = None,
        training: np.ndarray | None = None,
        ordered: int = 0,
    ) -> None:
        """A new graph, or ``index`` as loaded, whose nodes were last renumbered for locality
        when it held ``ordered`` (0: never); an SQ graph given ``training`` vectors learns
        its ranges from them at once (a bulk build: no float32 graph first)."""
        if index is None:
            sample = training if params.storage != "flat" else None
            index = faiss.IndexIDMap(_hnsw_graph(dim, params, sample))
        super().__init__(dim, index)
        self.params = params
        self._deleted: set[int] = set() if deleted is None else {int(i) for i in deleted}
        self._live_selector = self._make_live_selector()
        self._node_bitmaps: dict[int, tuple[RowSet, int, np.ndarray]] = {}
        self._node_bitmaps_lock = threading.Lock()
        self._sorted_rows_kept: tuple[np.ndarray, np.ndarray] | None = None
        self._live_nodes: tuple[int, np.ndarray] | None = None
        self._shared_parameters: dict[int, faiss.SearchParameters] = {}
        self._views: dict[bool, tuple[int, PackedLinks | None, faiss.Index | None, Any]] = {}
        self._packed: PackedLinks | None = None
        self._links_lock = threading.Lock()
        self.ordered = ordered

    @property
    def faiss_index(self) -> faiss.Index:
        """The ID-mapped FAISS graph, its links unpacked first (FAISS walks them itself)."""
        self._unpack()
        return self._index

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        self._unpack()
        super().add(ids, vectors)

    def seal(self, exclusive: AbstractContextManager | None = None) -> None:
        """Packs the links (:mod:`index.packed_links`: about a quarter of FAISS's bytes) and
        frees FAISS's, where ``packed_links`` asks for it and the native walk serves the graph;
        searches then walk the packed links. FAISS's links come back for good at the next add
        (or :attr:`faiss_index`), and for the moment a save takes. Packing reads the graph
        beside searches; freeing FAISS's links happens inside ``exclusive``."""
        if self._packed is not None or not self.params.packed_links or not self._index.ntotal:
            return
        stored = self.params.storage if self.trained else "flat"
        if native_funnel.walk(stored, self.params.native_walk) == "faiss":
            return
        hnsw = self._hnsw()
        packed = packed_links.pack(hnsw)
        with exclusive or nullcontext(), self._links_lock:
            self._packed = packed
            packed_links.release(hnsw)

    def _hnsw(self) -> Any:
        """FAISS's HNSW structure of the graph (its arrays are not in FAISS's type stubs)."""
        return cast(faiss.IndexHNSW, faiss.downcast_index(self._index.index)).hnsw

    def _unpack(self) -> None:
        """FAISS's links made again from the packed ones, for good (views of the packed links
        in use stay valid: they hold them)."""
        with self._links_lock:
            if self._packed is not None:
                packed_links.restore(self._hnsw(), self._packed)
                self._packed = None

    @contextmanager
    def _faiss_links(self) -> Iterator[None]:
        """FAISS's links present for the block, packed again after it (no view reads them:
        views made meanwhile still read the packed links)."""
        with self._links_lock:
            if self._packed is not None:
                packed_links.restore(self._hnsw(), self._packed)
            try:
                yield
            finally:
                if self._packed is not None:
                    packed_links.release(self._hnsw())

    def _make_live_selector(self) -> tuple[faiss.IDSelector, ...]:
        """``(IDSelectorTranslated(id map, live), live, deleted)`` with ``live`` =
        ``IDSelectorNot(deleted)``, or ``()``; FAISS holds raw pointers to all three.

        The walk tests graph nodes, so the ID map wraps any selector it is given in one that
        reads each node's row id first, and it does so by writing the wrapper into the
        parameters for the length of the call. This selector is translated already, so the ID
        map takes it as it is and writes nothing: parameters holding it are read-only and one
        object per efSearch serves every search, concurrent ones too."""
        if not self._deleted:
            return ()
        deleted = faiss.IDSelectorBatch(np.fromiter(self._deleted, np.int64))
        live = faiss.IDSelectorNot(deleted)
        id_map = self._index.id_map  # the vector itself, held by reference
        translated = faiss.IDSelectorTranslated(id_map, live)  # type: ignore[arg-type]
        return (translated, live, deleted)

    def __len__(self) -> int:
        return int(self._index.ntotal) - len(self._deleted)

    def deleted_ids(self) -> np.ndarray:
        return np.array(sorted(self._deleted), dtype=np.int64)

    def remove(self, ids: np.ndarray) -> None:
        """Tombstone ids that are in the index."""
        self._deleted.update(int(i) for i in ids)
        self._live_selector = self._make_live_selector()
        self._shared_parameters = {}  # they hold the old selector
        self._version += 1

    def search_parameters(
        self, ef_search: int | None = None, allowed: RowSet | None = None
    ) -> faiss.SearchParameters:
        """The walk's efSearch (``ef_search`` or the params' default) and its selector: the rows
        ``allowed``, else every row but the tombstones (none without any).

        With ``allowed`` they are made per call: the ID map rewrites that selector while it
        searches. Without, nothing rewrites them (:meth:`_make_live_selector`), so one object
        per efSearch is kept and shared until the tombstones change: treat it as read-only.
        ``allowed`` needs no tombstone test: a filter's rows are present in the store, and a
        removed row never comes back (row ids are not reused)."""
        ef = self.walk_ef(ef_search)
        if allowed is None:
            shared = self._shared_parameters.get(ef)
            if shared is None:
                shared = self._walk_parameters(ef)
                if self._live_selector:
                    shared.sel = self._live_selector[0]
                self._shared_parameters[ef] = shared
            return shared
        search_params = self._walk_parameters(ef)
        search_params.sel = allowed.selector()
        return search_params

    def walk_ef(self, ef_search: int | None = None) -> int:
        """A walk's efSearch: ``ef_search``, or the params' default."""
        return self.params.ef_search if ef_search is None else ef_search

    def returnable_nodes(self, allowed: RowSet | None = None) -> np.ndarray | None:
        """A bitmap over the graph's nodes (bit ``v`` of byte ``v // 8``, least significant
        first) of those a walk may return: the nodes of ``allowed``'s rows (as
        :meth:`search_filtered` walks), else the live ones, None without tombstones. Both are
        kept until the graph changes; see :meth:`search_parameters` for why ``allowed`` needs
        no tombstone test."""
        if allowed is not None:
            return self._node_bitmap(allowed)
        if not self._deleted:
            return None
        cached = self._live_nodes
        if cached is None or cached[0] != self._version:
            live = ~np.isin(self._node_ids(), self.deleted_ids())
            cached = (self._version, np.packbits(live, bitorder="little"))
            self._live_nodes = cached  # concurrent readers may both make it: either does
        return cached[1]

    @staticmethod
    def _walk_parameters(ef_search: int) -> faiss.SearchParameters:
        search_params = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]  # not stubbed
        search_params.efSearch = ef_search
        return search_params

    def search(
        self, queries: np.ndarray, k: int, ef_search: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The walk's ``k`` best live rows per query, scored as the graph stores them: walked in
        C where the graph holds float32 values or 8-bit codes (:mod:`index.native_funnel`, the
        walk alone; one thread per call), else by FAISS. ``queries`` are at the graph's width."""
        walk = self.native_view()
        if walk is None:
            return self._index.search(queries, k, params=self.search_parameters(ef_search))
        return self._walk_natively(walk, queries, k, ef_search, self.returnable_nodes())

    def _walk_natively(
        self,
        walk: Any,
        queries: np.ndarray,
        k: int,
        ef_search: int | None,
        nodes: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The native walk's ``k`` best rows per query among ``nodes`` (a bitmap; None: all)."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)  # as FAISS's wrapper does
        scores = np.empty((len(queries), k), dtype=np.float32)
        rows = np.empty((len(queries), k), dtype=np.int64)
        walk.search(queries, k, k, self.walk_ef(ef_search), nodes, scores, rows)
        return scores, rows

    def native_view(self, refine: faiss.Index | None = None) -> Any | None:
        """The native view of the graph and of ``refine``'s rows (the C2F funnel's), or of the
        graph alone (None), or None where FAISS walks it (:func:`index.native_funnel.
        native_graph`); remade after the graph changes (an add may have moved its arrays) or its
        links are packed or unpacked. Concurrent readers may both make one: either does."""
        if not self.params.native_walk:
            return None
        kept, version, packed = self._views.get(refine is None), self._version, self._packed
        if kept is None or kept[0] != version or kept[1] is not packed or kept[2] is not refine:
            view = native_funnel.native_graph(self._index, refine, packed)
            kept = (version, packed, refine, view)
            self._views[refine is None] = kept
        return kept[3]

    def search_filtered(
        self, queries: np.ndarray, k: int, allowed: RowSet, ef_search: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The graph walk with ``allowed`` as its selector (:meth:`search_parameters`). The walk
        may find fewer than ``k`` selected nodes; the caller checks.

        The walk tests every node it visits. Through the ID map each test would read the
        node's row id first (a random read of an 8-byte-per-node array: 8 MB at a million);
        so the selector is a bitmap over the graph's own node numbers instead, made once per
        filter and graph state (:meth:`_node_bitmap`), and the graph is searched directly."""
        bitmap = self._node_bitmap(allowed)
        walk = self.native_view()
        if walk is not None:
            return self._walk_natively(walk, queries, k, ef_search, bitmap)
        search_params = self._walk_parameters(self.walk_ef(ef_search))  # its own: a selector
        search_params.sel = faiss.IDSelectorBitmap(bitmap)  # type: ignore[call-arg,arg-type]
        scores, nodes = self._index.index.search(queries, k, params=search_params)
        return scores, np.where(nodes >= 0, self._node_ids()[np.maximum(nodes, 0)], -1)

    def _node_ids(self) -> np.ndarray:
        """The row id of each graph node: a view of the ID map's array (valid until an add)."""
        size = self._index.id_map.size()
        if not size:
            return np.zeros(0, dtype=np.int64)
        return faiss.rev_swig_ptr(self._index.id_map.data(), size)

    def _node_bitmap(self, allowed: RowSet) -> np.ndarray:
        """One bit per graph node, set for the nodes of ``allowed``'s rows, cached per filter
        (the last 8) and graph state; the nodes are found by binary search among the row ids
        sorted (:meth:`_sorted_rows`)."""
        with self._node_bitmaps_lock:
            cached = self._node_bitmaps.get(id(allowed))
        if cached is not None and cached[0] is allowed and cached[1] == self._version:
            return cached[2]
        rows, nodes = self._sorted_rows()
        positions = np.searchsorted(rows, allowed.rows)
        inside = positions < len(rows)
        positions = positions[inside]
        positions = positions[rows[positions] == allowed.rows[inside]]
        mask = np.zeros(len(rows), dtype=bool)
        mask[nodes[positions]] = True
        bitmap = np.packbits(mask, bitorder="little")
        with self._node_bitmaps_lock:
            while len(self._node_bitmaps) >= 8:
                self._node_bitmaps.pop(next(iter(self._node_bitmaps)))
            self._node_bitmaps[id(allowed)] = (allowed, self._version, bitmap)
        return bitmap

    def _sorted_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The graph's row ids ascending, and the node of each. Kept until nodes are added; nodes
        added since (rows in ascending order, above every earlier one: row ids only grow) are
        appended, anything else sorts again (a renumbered graph is a new object, sorted once)."""
        ids = self._node_ids()
        kept = self._sorted_rows_kept
        if kept is not None and len(kept[0]) == len(ids):
            return kept
        tail = ids[len(kept[0]) :] if kept is not None else ids
        if kept is not None and bool(
            np.all(tail[1:] > tail[:-1]) and (not len(kept[0]) or tail[0] > kept[0][-1])
        ):
            added = np.arange(len(kept[0]), len(ids), dtype=np.int64)
            kept = (np.concatenate([kept[0], tail]), np.concatenate([kept[1], added]))
        else:
            nodes = np.argsort(ids, kind="stable")
            kept = (ids[nodes], nodes)
        self._sorted_rows_kept = kept
        return kept

    def decoded(self) -> tuple[np.ndarray, np.ndarray]:
        ids, vectors = _flat_contents(self._index)
        live = ~np.isin(ids, self.deleted_ids())
        return ids[live], vectors[live]

    @property
    def _quantised(self) -> bool:
        """Whether the graph stores SQ codes (else float32 vectors)."""
        return isinstance(faiss.downcast_index(self._index.index), faiss.IndexHNSWSQ)

    @property
    def trained(self) -> bool:
        """Whether the graph stores what its params ask for (SQ codes need training first)."""
        return self._quantised == (self.params.storage != "flat")

    def replacement(self, snapshot: bool = False) -> HnswIndex | None:
        """A fresh graph of the live vectors when tombstones are due for compaction, or when an
        SQ graph has reached its training size (trained on every live vector); else a copy
        renumbered for locality when that is due (see the module docstring: sooner with
        ``snapshot``); else None."""
        compact = len(self._deleted) > self.params.max_deleted_fraction * self._index.ntotal
        train = not self.trained and len(self) >= self.params.sq_train_size
        if not (compact or train):
            growth = SNAPSHOT_GROWTH if snapshot else LOCALITY_GROWTH
            return self._renumbered() if self._locality_due(growth) else None
        ids, vectors = _flat_contents(self._index)
        live = ~np.isin(ids, self.deleted_ids())
        vectors = np.ascontiguousarray(vectors[live])
        training = vectors if self.params.storage != "flat" and (train or self.trained) else None
        graph = faiss.IndexIDMap(_hnsw_graph(self.dim, self.params, training))
        fresh = HnswIndex(self.dim, self.params, graph)
        fresh.add(ids[live], vectors)
        return fresh._renumbered() if fresh._locality_due() else fresh

    def _locality_due(self, growth: float = LOCALITY_GROWTH) -> bool:
        """Whether the graph has reached ``locality_from`` nodes and, if it was renumbered
        before, grown by ``growth`` since."""
        nodes = int(self._index.ntotal)
        return nodes >= self.params.locality_from and nodes >= growth * self.ordered

    def _renumbered(self) -> HnswIndex:
        """A copy with its nodes in locality order (:func:`index.graph_order.reordered`), the
        same rows and tombstones."""
        return HnswIndex(
            self.dim,
            self.params,
            reordered(cast(faiss.IndexIDMap, self.faiss_index)),
            self.deleted_ids(),
            ordered=int(self._index.ntotal),
        )

    def nbytes(self) -> int:
        """The graph's size from its parts (vector codes, links, levels, id map), not by
        serialising it: at millions of vectors that would copy gigabytes on every call."""
        graph = faiss.downcast_index(self._index.index)
        hnsw = graph.hnsw  # type: ignore[attr-defined]  # downcast to an IndexHNSW
        packed = self._packed
        if packed is not None:
            return graph.ntotal * self.bytes_per_vector() + packed.nbytes + 8 * graph.ntotal
        return (
            graph.ntotal * self.bytes_per_vector()
            + 4 * hnsw.neighbors.size()
            + 4 * hnsw.levels.size()
            + 8 * hnsw.offsets.size()
            + 8 * self._index.id_map.size()
        )

    def bytes_per_vector(self) -> int:
        if not self._quantised:
            return 4 * self.dim
        graph = faiss.downcast_index(self._index.index)
        return int(graph.storage.sa_code_size())  # type: ignore[attr-defined]  # an IndexHNSW

    def stats(self) -> dict:
        return {
            **super().stats(),
            "deleted": len(self._deleted),
            "trained": self.trained,
            "locality_ordered_nodes": self.ordered,
            "links_packed": self._packed is not None,
            **asdict(self.params),
        }

    def save(self, path: Path) -> list[Path]:
        deleted_path = path.with_suffix(".deleted.npy")
        np.save(deleted_path, self.deleted_ids())
        ordered_path = path.with_suffix(".ordered.npy")
        np.save(ordered_path, np.array([self.ordered], dtype=np.int64))
        with self._faiss_links():
            return [*super().save(path), deleted_path, ordered_path]


class PqIndex(VectorIndex):
    """Product quantisation once trained, an exact flat index until then."""

    kind = "pq"

    def __init__(
        self,
        dim: int,
        params: PqParams,
        index: faiss.IndexIDMap2 | None = None,
        codebooks: np.ndarray | None = None,
    ) -> None:
        if codebooks is not None:
            quantizer = pq_from_codebooks(codebooks)
            if quantizer.d != dim:
                raise ValueError(f"PQ codebooks are for dim {quantizer.d}, not {dim}")
            params = PqParams(m=quantizer.pq.M, nbits=quantizer.pq.nbits)
            index = index or faiss.IndexIDMap2(quantizer)
        params.check_dim(dim)
        super().__init__(dim, index or faiss.IndexIDMap2(faiss.IndexFlatIP(dim)))
        self.params = params
        self.from_codebooks = codebooks is not None

    @property
    def trained(self) -> bool:
        return isinstance(faiss.downcast_index(self._index.index), faiss.IndexPQ)

    def decoded(self) -> tuple[np.ndarray, np.ndarray]:
        if not self.trained:
            return super().decoded()
        ids = faiss.vector_to_array(self._index.id_map).astype(np.int64)
        return ids, self._index.index.reconstruct_n(0, self._index.ntotal)

    def replacement(self, snapshot: bool = False) -> PqIndex | None:
        if self.trained or len(self) < self.params.train_size:
            return None
        ids, vectors = _flat_contents(self._index)
        quantizer = faiss.IndexPQ(
            self.dim, self.params.m, self.params.nbits, faiss.METRIC_INNER_PRODUCT
        )
        quantizer.train(vectors)
        fresh = PqIndex(self.dim, self.params, faiss.IndexIDMap2(quantizer))
        fresh.add(ids, vectors)
        return fresh

    def bytes_per_vector(self) -> int:
        if not self.trained:
            return super().bytes_per_vector()
        inner = faiss.downcast_index(self._index.index)
        return int(inner.pq.code_size)  # type: ignore[attr-defined]  # downcast to an IndexPQ

    def stats(self) -> dict:
        """``trained`` False means the index still answers exactly, from a flat index;
        ``codebooks`` says whether the centroids came with the bundle or were trained here."""
        return {
            **super().stats(),
            "trained": self.trained,
            "codebooks": "bundle" if self.from_codebooks else "trained",
            "train_size": self.params.train_size,
            "m": self.params.m,
            "nbits": self.params.nbits,
        }


def create_index(
    kind: str,
    dim: int,
    hnsw: HnswParams,
    pq: PqParams,
    pq_codebooks: np.ndarray | None = None,
    training: np.ndarray | None = None,
) -> VectorIndex:
    """A new, empty index of ``kind``; a ``pq`` one uses ``pq_codebooks`` when given, an SQ
    ``hnsw`` one is trained on ``training`` when given."""
    if kind == "exact":
        return ExactIndex(dim)
    if kind == "hnsw":
        return HnswIndex(dim, hnsw, training=training)
    if kind == "pq":
        return PqIndex(dim, pq, codebooks=pq_codebooks)
    raise ValueError(f"unknown index kind {kind!r}; expected one of {', '.join(KINDS)}")


def read_index(
    kind: str,
    dim: int,
    path: Path,
    hnsw: HnswParams,
    pq: PqParams,
    pq_codebooks: np.ndarray | None = None,
) -> VectorIndex:
    """Load an index that :meth:`VectorIndex.save` wrote; :class:`ValueError` if it is not one
    of ``kind`` and ``dim`` (FAISS raises :class:`RuntimeError` for an unreadable file)."""
    index = faiss.read_index(str(path))
    inner = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexIDMap) else None
    expected = {
        "exact": (faiss.IndexFlat,),
        "hnsw": (faiss.IndexHNSWFlat, faiss.IndexHNSWSQ),
        "pq": (faiss.IndexFlat, faiss.IndexPQ),
    }[kind]
    if (
        not isinstance(inner, expected)
        or index.d != dim
        or index.metric_type != faiss.METRIC_INNER_PRODUCT
    ):
        raise ValueError(f"{path} does not hold a {dim}-d inner-product {kind} index")
    if kind == "hnsw":
        graph = cast(faiss.IndexIDMap, index)
        ordered_path = path.with_suffix(".ordered.npy")  # absent: saved before locality order
        ordered = int(np.load(ordered_path)[0]) if ordered_path.exists() else 0
        deleted = np.load(path.with_suffix(".deleted.npy"))
        return HnswIndex(dim, hnsw, graph, deleted, ordered=ordered)
    mapped = cast(faiss.IndexIDMap2, index)  # read_index returns the class that was saved
    if kind == "exact":
        return ExactIndex(dim, mapped)
    if pq_codebooks is not None:
        return PqIndex(dim, pq, mapped, codebooks=pq_codebooks)
    return PqIndex(dim, pq, mapped)
