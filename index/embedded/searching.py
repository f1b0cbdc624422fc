"""Reading an embedded collection: documents by id, searches of one index (cosine or SFS at a
prefix), C2F (a prefix shortlist re-ranked exactly at the full dimension), and its figures."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from index.checks import check_count
from index.embedded.filter_plan import FilterPlanning
from index.embedded.state import spec_name
from index.faiss_indexes import HnswIndex
from index.filters import Filter
from index.rerank import rerank
from index.types import CollectionStats, Contents, Document, Hit, IndexStats, SearchResult, Timings
from index.vectors import as_matrix, prefix_unit, unit_rows


class Searching(FilterPlanning):
    """Reads under the shared lock."""

    @property
    def searches_now(self) -> bool:
        """Whether a search would take the shared lock at once (no write holds it or waits)."""
        return not self._lock.writer_active

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

    def graph_storage(self, dim: int) -> str | None:
        """What the cosine HNSW graph at prefix ``dim`` stores now: ``flat``, or the ``sq8`` /
        ``sq4`` codes it asks for once they are trained (float32 until enough vectors exist);
        None without such a graph."""
        spec = self._specs.get(spec_name("cosine", dim, "hnsw"))
        if spec is None:
            return None
        with self._lock.read():
            graph = self._indexes[spec.name]
            assert isinstance(graph, HnswIndex)
            return graph.params.storage if graph.trained else "flat"

    def sample_vectors(self, count: int, seed: int = 0) -> tuple[list[str], np.ndarray]:
        """Up to ``count`` stored documents drawn at random (``seed``): their ids and full unit
        vectors (float32), as a measurement's queries."""
        with self._lock.read():
            rows = self._store.live_row_ids()
            rows = rows[: int(np.searchsorted(rows, self._vectors.written_rows))]
            if len(rows) > count:
                rows = np.sort(np.random.default_rng(seed).choice(rows, count, replace=False))
            named = self._store.named(rows.tolist(), False)
            return [str(doc_id) for doc_id, _ in named], self._vectors.gather(rows)

    def search_exact(self, query_vectors: np.ndarray, k: int) -> SearchResult:
        """The exact top-``k`` by full-dimension cosine over every stored document, scored from
        the full vectors whatever indexes exist (a scan of them all: a measurement's truth, not
        a serving path)."""
        full = unit_rows(as_matrix(query_vectors, (self.dim,), "query_vectors"))
        k = check_count(k, "k")
        with self._lock.read():
            started = time.perf_counter()
            scores, rows = self._exact_subset(full, k, self._store.live_row_ids(), None)
            timings: Timings = {"search": time.perf_counter() - started}
            return SearchResult(self._hits(scores, rows, False), timings, None)

    def _hits(self, scores: np.ndarray, rows: np.ndarray, contents: bool) -> list[list[Hit]]:
        """Hits per query from FAISS's ``(queries, k)`` score and row matrices, named from the
        in-memory table of the rows the indexes hold (:mod:`index.embedded.row_names`), or
        with ``contents`` given their names, text and metadata from one store query for every
        query's rows. A row removed from the store whose removal the indexes have not applied
        yet is still named (the search saw that state), but has no contents to show: with
        ``contents`` it is left out. Called under the read lock, so the names are those of the
        state the search saw."""
        if not contents:
            return self._names.named(rows, scores, Hit)
        score_lists = scores.tolist()  # Python numbers: no per-hit numpy
        row_lists = rows.tolist()
        wanted = (row for query_rows in row_lists for row in query_rows if row >= 0)
        found = self._store.names(wanted, True)
        return [
            [
                Hit(named[0], score, named[1])
                for row, score in zip(query_rows, query_scores, strict=True)
                if (named := found.get(row)) is not None and named[1] is not None
            ]
            for query_rows, query_scores in zip(row_lists, score_lists, strict=True)
        ]

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
        contents: bool = False,
    ) -> SearchResult:
        """The ``k`` best documents for each query, best first, from one index.

        Queries may be full vectors or already cut to ``dim``; either way they are cut and
        normalised here. Scores are cosines of the ``dim`` prefixes, or with ``scoring="sfs"``
        mean fragment cosines. ``ef_search`` overrides the HNSW beam width for this search.
        ``where`` keeps only documents whose metadata match it (see the module docstring); the
        result's ``filtering`` says how it was applied. Its ``timings["search"]`` is the seconds
        of the index work (listing a filter's rows and reading the hits' ids aside). With
        ``contents``, each hit carries its document's text and metadata, read in the same store
        query that names the hits.
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
            return SearchResult(self._hits(scores, rows, contents), timings, filtering)

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
        contents: bool = False,
    ) -> SearchResult:
        """Coarse-to-fine: shortlist ``k * factor`` by cosine at the ``shortlist_dim`` prefix
        with its ``kind`` index, then re-rank the shortlist exactly by full-dimension cosine
        and keep ``k``, both in one native call (:mod:`index.funnel`). The prefix needs an
        index of that kind (:class:`ValueError` otherwise); at the full dimension itself this is
        plain search there with exact scores.

        The result's ``timings["funnel"]`` is the seconds of that call. ``ef_search`` overrides
        the HNSW beam width of the shortlist search (at least the shortlist's size is sensible).
        With ``where``, the shortlist holds only matching documents: an HNSW walk tests the
        filter's rows inside the funnel, and a query it leaves short scores them all at the full
        dimension; a scan kind shortlists by scan and re-ranks with
        :func:`index.rerank.rerank` (timed as ``"shortlist"`` and ``"rerank"``). When few
        match, they are all scored at the full dimension, with no shortlist (``"rerank"``).
        ``contents`` as for :meth:`search`."""
        spec = self._spec("cosine", shortlist_dim, kind)
        k = check_count(k, "k")
        shortlist = k * check_count(factor, "factor")
        queries = as_matrix(query_vectors, (self.dim,), "query_vectors")
        # The unfiltered funnel normalises inside its native call; the other paths in numpy.
        full = queries if where is None else unit_rows(queries)
        timings: Timings = {}
        filtering, allowed = self._resolve(where)
        with self._lock.read():
            if not self._count or (allowed is not None and not len(allowed)):
                return SearchResult([[] for _ in full], timings, filtering)
            k = min(k, self._count)  # FAISS allocates n * k results
            shortlist = min(max(shortlist, k), self._count)
            index = self._indexes[spec.name]
            started = time.perf_counter()
            if allowed is None:
                scores, rows = self._funnel(spec).search(full, k, shortlist, ef_search)
                timings["funnel"] = time.perf_counter() - started
            elif len(allowed) <= self.filters.exact_subset_rows(self._count):
                # Few matches: score them all at the full dimension; nothing to re-rank.
                assert filtering is not None
                scores, rows = self._exact_subset(full, k, allowed.rows, None)
                filtering.update({"mode": "exact_subset", "matching": len(allowed)})
                timings["rerank"] = time.perf_counter() - started
            elif isinstance(index, HnswIndex):
                assert filtering is not None
                scores, rows = self._filtered_funnel(
                    spec, full, k, shortlist, allowed, ef_search, filtering
                )
                timings["funnel"] = time.perf_counter() - started
            else:
                assert filtering is not None
                prefix = prefix_unit(full, shortlist_dim)
                _, candidates = self._filtered(
                    spec, prefix, shortlist, allowed, ef_search, filtering
                )
                shortlisted = time.perf_counter()
                scores, rows = self._rerank(full, candidates, k)
                timings["shortlist"] = shortlisted - started
                timings["rerank"] = time.perf_counter() - shortlisted
            return SearchResult(self._hits(scores, rows, contents), timings, filtering)

    def _rerank(
        self, full: np.ndarray, candidates: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The best ``k`` of each query's candidate rows by full-dimension cosine, in numpy."""
        kept = [rows[rows >= 0] for rows in candidates]
        scores, positions = rerank(full, (self._vectors.gather(r) for r in kept), k)
        best_rows = np.full(positions.shape, -1, dtype=np.int64)
        for i, (rows, best) in enumerate(zip(kept, positions, strict=True)):
            found = best >= 0
            best_rows[i, found] = rows[best[found]]
        return scores, best_rows

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
