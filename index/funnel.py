"""The C2F funnel as one native call: a shortlist from a prefix index, re-ranked exactly at the
full dimension, inside FAISS.

The chain is FAISS's own ``IndexRefine``, behind an ``IndexPreTransform`` that normalises the full
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
inside the walk, and the re-rank only sees rows the walk kept.
"""

from __future__ import annotations

import faiss
import numpy as np

MAX_SHARED_PARAMETERS = 64
"""Parameter sets kept for reuse (one per shortlist factor and efSearch in use)."""


class Funnel:
    """``IndexRefine`` over one prefix index and the full-vector file (see the module
    docstring). Holds references to both: FAISS keeps raw pointers to them."""

    def __init__(self, base: faiss.Index, prefix_dim: int, refine: faiss.Index) -> None:
        self.base = base
        self.refine = refine
        first = faiss.RemapDimensionsTransform(refine.d, prefix_dim, False)  # type: ignore[arg-type]
        self._transforms = (first, faiss.NormalizationTransform(prefix_dim, 2.0))
        self._chain = faiss.IndexPreTransform(base)
        for transform in reversed(self._transforms):  # False: the first values, not spread out
            self._chain.prepend_transform(transform)
        self._refined = faiss.IndexRefine(self._chain, self._chain)
        self._refined.refine_index = refine
        self._refined.ntotal = refine.ntotal
        self._refined.own_fields = False
        self._unit = faiss.NormalizationTransform(refine.d, 2.0)
        self._index = faiss.IndexPreTransform(self._unit, self._refined)
        self._shared: dict[tuple[float, int | None], tuple[faiss.SearchParameters, object]] = {}

    def search(
        self,
        queries: np.ndarray,
        k: int,
        shortlist: int,
        base_params: faiss.SearchParameters | None,
        shared: bool = True,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The best ``k`` rows by full-dimension inner product among each query's ``shortlist``
        (at least ``k``) from the base index, and their scores, ``(n, k)`` each, best first, -1
        where fewer were found. ``queries`` are full vectors of any norm (float32, C-contiguous:
        normalised inside the call, about 10 µs less than in numpy); ``base_params`` are the base
        index's own search parameters (None: its defaults), ``shared`` when they are the object
        that index keeps for every search (not made for this call, as a filter's are)."""
        k_factor = (shortlist + 0.5) / k  # FAISS truncates k * k_factor to the shortlist
        return self._index.search(
            queries, k, params=self._parameters(k_factor, base_params, shared)
        )

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
