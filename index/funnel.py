"""The C2F funnel in one native call per query batch: a shortlist from a prefix index,
re-ranked exactly at the full dimension.

Two native paths do this, with the same answers up to rounding:

- for an HNSW graph of float32 values or 8-bit codes (``flat``, ``sq8``, ``sq8u``), Fractal's
  own walk and re-rank (:mod:`index.native_funnel`), which overlaps the walk's memory loads and
  reads the graph's links where they are packed (:mod:`index.packed_links`);
- for every other prefix index, and where that extension is not built, FAISS's own
  ``IndexRefine``.

The FAISS chain is ``IndexRefine`` behind an ``IndexPreTransform`` that normalises the full
query (``NormalizationTransform``; a zero query stays zero), so a caller passes queries as given:

- its base is the prefix index (an ID-mapped graph or flat or PQ index, whose ids are row ids)
  behind an ``IndexPreTransform`` that keeps the query's first ``prefix_dim`` values
  (``RemapDimensionsTransform``) and re-normalises them (``NormalizationTransform``), so one
  full query serves both stages;
- its refine index is the full-vector file as FAISS maps it
  (:attr:`index.embedded.vector_file.VectorFile.refine`: row ``r`` is vector ``r``), which
  scores each shortlisted row id by inner product of the full unit vectors.

So a query batch costs one call, with no Python per query or per candidate; the full vectors
stay file-backed. ``IndexRefine`` checks at construction that base and refine hold as many
vectors; here they do not (the file has a slot per row id, removed and unwritten rows
included), so it is made over the base twice and the refine index is set after. Search
parameters reach the base's own index (through a ``SearchParametersPreTransform`` on each side
of the refine), so an HNSW walk's efSearch and its selector (tombstones, a filter's rows) apply
inside the walk, and the re-rank only sees rows the walk kept. The native path takes the same
rows as a bitmap over the graph's nodes (:meth:`index.faiss_indexes.HnswIndex.returnable_nodes`).
"""

from __future__ import annotations

from typing import Any

import faiss
import numpy as np

from index.faiss_indexes import HnswIndex, VectorIndex
from index.rowset import RowSet

MAX_SHARED_PARAMETERS = 64
"""Parameter sets kept for reuse (one per shortlist factor and efSearch in use)."""


class Funnel:
    """The funnel over one prefix index and the full-vector file (see the module docstring).
    Holds references to both: FAISS and the native view keep raw pointers to them."""

    def __init__(
        self, base: VectorIndex, prefix_dim: int, refine: faiss.Index, native: bool = True
    ) -> None:
        """``native``: use the native walk where it serves the base (False: FAISS always, for
        comparing the two)."""
        self.base = base
        self.refine = refine
        self._prefix_dim = prefix_dim
        self._faiss: faiss.Index | None = None
        self._faiss_parts: tuple[Any, ...] = ()
        self._shared: dict[tuple[float, int | None], tuple[faiss.SearchParameters, object]] = {}
        self._native_wanted = native

    @property
    def native(self) -> bool:
        """Whether searches run the native walk and re-rank (:mod:`index.native_funnel`)."""
        return self._native_graph() is not None

    def search(
        self,
        queries: np.ndarray,
        k: int,
        shortlist: int,
        ef_search: int | None = None,
        allowed: RowSet | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The best ``k`` rows by full-dimension inner product among each query's ``shortlist``
        (at least ``k``) from the base index, and their scores, ``(n, k)`` each, best first, -1
        (and -inf) where fewer were found. ``queries`` are full vectors of any norm (float32,
        C-contiguous: normalised inside the call, about 10 µs less than in numpy).
        ``ef_search`` is a graph walk's efSearch (None: the index's default); with ``allowed``
        only those rows are returned (a graph base only), else every live row."""
        graph = self._native_graph()
        if graph is not None:
            assert isinstance(self.base, HnswIndex)
            scores = np.empty((len(queries), k), dtype=np.float32)
            rows = np.empty((len(queries), k), dtype=np.int64)
            nodes = self.base.returnable_nodes(allowed)
            graph.search(queries, k, shortlist, self.base.walk_ef(ef_search), nodes, scores, rows)
            return scores, rows
        k_factor = (shortlist + 0.5) / k  # FAISS truncates k * k_factor to the shortlist
        params = self._parameters(
            k_factor, self.base.search_parameters(ef_search, allowed), allowed is None
        )
        return self._faiss_chain().search(queries, k, params=params)

    def _native_graph(self) -> Any | None:
        """The native view of the base graph and the rows (None where FAISS searches)."""
        if not self._native_wanted or not isinstance(self.base, HnswIndex):
            return None
        return self.base.native_view(self.refine)

    def _faiss_chain(self) -> faiss.Index:
        """FAISS's funnel (see the module docstring), made at its first search (concurrent
        readers may both make one: either does)."""
        chain = self._faiss
        if chain is None:
            first = faiss.RemapDimensionsTransform(self.refine.d, self._prefix_dim, False)  # type: ignore[arg-type]
            unit_prefix = faiss.NormalizationTransform(self._prefix_dim, 2.0)
            prefix = faiss.IndexPreTransform(self.base.faiss_index)
            prefix.prepend_transform(unit_prefix)
            prefix.prepend_transform(first)  # False above: the first values, not spread out
            refined = faiss.IndexRefine(prefix, prefix)
            refined.refine_index = self.refine
            refined.ntotal = self.refine.ntotal
            refined.own_fields = False
            unit = faiss.NormalizationTransform(self.refine.d, 2.0)
            chain = faiss.IndexPreTransform(unit, refined)
            self._faiss_parts = (first, unit_prefix, prefix, refined, unit)  # FAISS points to them
            self._faiss = chain
        return chain

    def _parameters(
        self, k_factor: float, base_params: faiss.SearchParameters | None, shared: bool
    ) -> faiss.SearchParameters:
        """``IndexRefine``'s parameters around ``base_params``: kept per factor and efSearch
        while the base index keeps the same object (about 10 µs of FAISS's Python attribute
        handling a search saves), made per call around per-call ones. A shared object replaced
        by the base index (its tombstones changed) drops everything kept, so no superseded
        selector stays alive here."""
        if not shared:
            return self._wrapped(k_factor, base_params)
        key = (k_factor, getattr(base_params, "efSearch", None))
        entry = self._shared.get(key)
        if entry is not None and entry[1] is base_params:
            return entry[0]
        if entry is not None or len(self._shared) >= MAX_SHARED_PARAMETERS:
            self._shared = {}
        params = self._wrapped(k_factor, base_params)
        self._shared[key] = (params, base_params)
        return params

    @staticmethod
    def _wrapped(
        k_factor: float, base_params: faiss.SearchParameters | None
    ) -> faiss.SearchParameters:
        """New parameters for the normalised ``IndexRefine``: the shortlist factor and the
        base's own."""
        refined = faiss.IndexRefineSearchParameters()  # type: ignore[attr-defined]  # not stubbed
        refined.k_factor = k_factor
        if base_params is not None:
            refined.base_index_params = _through_transform(base_params)
        return _through_transform(refined)


def _through_transform(params: faiss.SearchParameters) -> faiss.SearchParameters:
    """``params`` for the index behind an ``IndexPreTransform``."""
    wrapped = faiss.SearchParametersPreTransform()  # type: ignore[attr-defined]  # not stubbed
    wrapped.index_params = params
    return wrapped
