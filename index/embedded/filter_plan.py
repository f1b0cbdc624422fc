"""Filter planning for an embedded collection: the rows a filter allows (cached per filter
until the next write), and the path each filtered search takes: the exact subset when few rows
match, else the index with the rows as a selector (HNSW) or a scan, falling back to the exact
subset for a query that found too few."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from index.embedded.state import CollectionState, IndexSpec
from index.faiss_indexes import HnswIndex
from index.filters import Filter
from index.rowset import RowSet
from index.types import Filtering

CHUNK_ROWS = 50_000
"""Rows scored per step of an exact subset: bounded memory at any number of matches."""


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
      (docs/benchmarks.md, "Filters").
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


class FilterPlanning(CollectionState):
    """Resolves filters and searches among the rows they allow."""

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

    def _walk_ef(self, index: HnswIndex, ef_search: int | None, allowed: RowSet) -> int:
        """The efSearch of a graph walk among ``allowed`` (see :class:`FilterParams`)."""
        return self.filters.hnsw_ef(index.walk_ef(ef_search), max(self._count, 1), len(allowed))

    def _fill_short(
        self,
        queries: np.ndarray,
        found: tuple[np.ndarray, np.ndarray],
        k: int,
        allowed: RowSet,
        space: tuple[str, int] | None,
    ) -> list[int]:
        """Give each query that ``found`` fewer than ``min(k, matches)`` rows the exact subset
        in ``space`` instead (in place); return which queries those were."""
        scores, rows = found
        short = np.flatnonzero((rows >= 0).sum(axis=1) < min(k, len(allowed)))
        if len(short):
            scores[short], rows[short] = self._exact_subset(queries[short], k, allowed.rows, space)
        return short.tolist()

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
                ef_search = self._walk_ef(index, ef_search, allowed)
                report["ef_search"] = ef_search
            scores, rows = index.search_filtered(queries, k, allowed, ef_search)
            report["fallback"] = self._fill_short(queries, (scores, rows), k, allowed, space)
        filtering.update(report)
        return scores, rows

    def _filtered_funnel(
        self,
        spec: IndexSpec,
        full: np.ndarray,
        k: int,
        shortlist: int,
        allowed: RowSet,
        ef_search: int | None,
        filtering: Filtering,
    ) -> tuple[np.ndarray, np.ndarray]:
        """C2F among ``allowed`` (more than the exact subset's rows) with an HNSW shortlist:
        the funnel with the rows as the walk's selector, the exact subset at the full dimension
        for a query left short. ``full`` are full unit queries. Under the read lock."""
        index = self._indexes[spec.name]
        assert isinstance(index, HnswIndex)
        ef = self._walk_ef(index, ef_search, allowed)
        scores, rows = self._funnel(spec).search(full, k, shortlist, ef, allowed)
        short = self._fill_short(full, (scores, rows), k, allowed, None)
        filtering.update({"mode": index.filter_mode, "ef_search": ef, "fallback": short})
        return scores, rows
