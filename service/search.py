"""Search: from the options a request gives to the route each query takes and its hits.

A route is the resolution (granularity → prefix dimension of the manifest), the index kind, the
re-ranking and the scoring. ``granularity=auto`` is decided per query by
:class:`service.granularity.GranularityRouter`. ``rerank=c2f`` answers at the full dimension: a
shortlist of ``k × c2f_factor`` from the index at the shortlist prefix, re-ranked exactly by
full-vector cosine (:meth:`index.Collection.search_c2f`). The shortlist prefix is the bundle's
(:attr:`bundle.Manifest.shortlist_dim`, measured at export; the coarse prefix for bundles made
before that; with ``FRACTAL_FIRST_STAGE=bundle`` or ``index`` the measured first stage's
prefix, :meth:`index.settings.StorageSettings.shortlist_dim`), or a request's ``shortlist_dim``: a
trained prefix with an index of the requested kind (the coarse, shortlist and fine prefixes
have them, see :meth:`service.settings.Settings.index_layout`). At the full dimension itself,
C2F is plain search there. A query that auto routes to coarse is answered at the coarse prefix
without re-ranking, and its route says so. Where the layout builds no index of the requested
kind at the fine prefix (``FRACTAL_FINE_INDEX_KINDS=none``: full vectors only on disk), a fine
query is answered by C2F, and its route says so.

A request's ``filter`` (:mod:`index.filters`: a JSON object, or its JSON text in a query string)
is parsed in :meth:`Searcher.plan`, where a bad one is a 422 naming the JSON path of the
offending part (``filter.and[1].gte``), and applied inside the index search on every route
(:class:`index.Collection`); each query's route says how (:class:`FilterReport`).

Everything here blocks (FAISS, SQLite): the service calls :meth:`Searcher.run` in a search
thread, or on its event loop for a search of one query that costs less than the hop to a thread
and back (:meth:`service.runtime.Runtime.search`).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from bundle import COARSE, FINE, Manifest
from index import Hit, SearchResult, native_funnel
from index.backend import IndexBackend
from index.embedded import Collection
from index.filters import Filter, FilterError, parse_filter, parse_filter_json
from index.search_tuning import drifted, recorded_first_stage, served_graph
from index.types import Filtering
from service.errors import InvalidRequest
from service.granularity import AutoDecision, GranularityRouter
from service.metrics import Metrics
from service.settings import Settings

AUTO = "auto"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class C2fWalk:
    """How C2F walks the graph at the default shortlist prefix: its efSearch (None: the graph's
    common beam) and shortlist factor, from the settings or from ``fractal tune``'s record
    (``source`` ``index``, with the record's choice as ``measured``)."""

    ef_search: int | None
    factor: int
    source: str
    measured: dict[str, Any] | None


@dataclass(frozen=True)
class FirstStage:
    """C2F's first stage in use on a collection: the graph's prefix, codes and degree, where
    they come from (``index``: measured on the collection's own documents; ``bundle``: the
    export's measured choice; ``settings``), and that measurement; beside it, the fastest one
    measured on the collection's own documents, if measured (applied with source ``index``)."""

    source: str
    shortlist_dim: int
    hnsw_storage: str
    hnsw_m: int
    walk: str
    measured: dict[str, Any] | None
    index_choice: dict[str, Any] | None


@dataclass(frozen=True)
class SearchPlan:
    """A request's checked options, shared by all its queries."""

    k: int
    granularity: str
    index: str
    rerank: str
    scoring: str
    shortlist_dim: int
    """The prefix C2F shortlists at (used by fine queries that take C2F)."""
    where: Filter | None = None
    """The metadata filter, parsed."""


@dataclass(frozen=True)
class QueryPath:
    """The path one query actually took (its answer's ``route``)."""

    granularity: str
    dimension: int
    index: str
    rerank: str
    scoring: str
    shortlist_dimension: int | None = None
    shortlist_k: int | None = None


@dataclass(frozen=True)
class Match:
    id: str
    score: float
    text: str
    metadata: dict[str, Any]


@dataclass(frozen=True)
class FilterReport:
    """How a metadata filter was applied to one query: ``exact_subset`` (exact scores of the
    matching documents alone), ``selector`` (an HNSW walk with the matching ids as its
    selector, at ``ef_search``; ``fallback`` when it found fewer than k and the exact subset
    answered), ``scan`` (an exact or PQ scan keeping the matching documents) or ``milvus`` (a
    Milvus expression applied in Milvus's search), how many documents matched (null for
    ``milvus``, which does not count them), and the milliseconds spent listing them (next to
    nothing when the same filter was listed since the last write)."""

    mode: str
    matching: int | None
    resolve_ms: float
    ef_search: int | None = None
    fallback: bool = False


@dataclass(frozen=True)
class QueryResult:
    route: QueryPath
    auto: AutoDecision | None
    matches: list[Match]
    filter: FilterReport | None = None


@dataclass(frozen=True)
class SearchOutcome:
    """Results in query order, and where the time went (seconds)."""

    results: list[QueryResult]
    route_seconds: float
    search_seconds: float
    rerank_seconds: float
    fetch_seconds: float


class Searcher:
    """Plans and runs searches over one collection."""

    def __init__(
        self,
        collection: IndexBackend,
        manifest: Manifest,
        router: GranularityRouter,
        settings: Settings,
        metrics: Metrics,
    ) -> None:
        self.collection = collection
        self.manifest = manifest
        self.router = router
        self.default_k = settings.default_k
        self.c2f_factor = settings.c2f_factor
        self.folder = collection.path if isinstance(collection, Collection) else None
        """The collection's folder (embedded backend), where its measurements are recorded."""
        self.coarse_beam = settings.coarse_beam(manifest, self.folder)
        self.coarse_ef_search = self.coarse_beam[0]
        self.shortlist_dim = settings.shortlist_dim(manifest, self.folder)
        self.layout = collection.layout
        self.c2f_walk = self._c2f_walk(settings)
        self.first_stage = self._first_stage(settings, manifest)
        # The coarse prefix's kinds first (the first is the default), then any only built at fine.
        self.index_kinds = tuple(dict.fromkeys(settings.index_kinds + collection.index_kinds))
        self.metrics = metrics
        self._routes: dict[tuple[str, int, str, str, str, int], QueryPath] = {}
        """Each route decided so far, by granularity and the plan options it depends on (a
        bounded set: the kinds, scorings, shortlist prefixes and k the requests may name)."""

    def _c2f_walk(self, settings: Settings) -> C2fWalk:
        """C2F's knobs on the collection's graph at the shortlist prefix (see
        :meth:`service.settings.Settings.c2f_walk`); an unreadable tuning record is logged and
        the settings apply, and a record measured on a collection of a very different size is
        applied with a warning."""
        collection, folder, graph = self.collection, None, None
        wanted = settings.c2f_tuning == "index"
        if wanted and isinstance(collection, Collection):
            folder = collection.path
            if "hnsw" in self.layout.get(self.shortlist_dim, ()):
                graph = served_graph(collection, self.shortlist_dim)
        try:
            walk = C2fWalk(*settings.c2f_walk(folder, graph))
        except ValueError as exc:
            log.warning("C2F tuning not applied: %s", exc)
            return C2fWalk(None, settings.c2f_factor, "settings", None)
        measured = (walk.measured or {}).get("documents")
        if graph is not None and isinstance(measured, int) and drifted(measured, graph.documents):
            log.warning(
                "C2F tuning of %s was measured at %d documents and the collection holds %d: "
                "run fractal tune again",
                folder,
                measured,
                graph.documents,
            )
        return walk

    def _first_stage(self, settings: Settings, manifest: Manifest) -> FirstStage:
        """The first stage in use (:meth:`service.settings.Settings.first_stage_choice` on this
        collection's folder), beside ``fractal tune --first-stages``'s fastest at the recall
        floor on this collection's own documents
        (:func:`index.search_tuning.recorded_first_stage`); an unreadable record is logged and
        shown as none, and one measured on a collection of a very different size is served with
        a warning."""
        measured, source = settings.first_stage_choice(manifest, self.folder)
        applied = settings.for_collection(manifest, self.folder)
        try:
            recorded = recorded_first_stage(self.folder, settings.first_stage_recall)
        except ValueError as exc:
            log.warning("first-stage record not shown: %s", exc)
            recorded = None
        documents = (recorded or {}).get("documents")
        if source == "index" and isinstance(documents, int):
            held = self.collection.stats().documents
            if drifted(documents, held):
                log.warning(
                    "the first stage of %s was measured at %d documents and the collection "
                    "holds %d: run fractal tune --first-stages again",
                    self.folder,
                    documents,
                    held,
                )
        return FirstStage(
            source,
            self.shortlist_dim,
            applied.hnsw_storage,
            applied.hnsw_m,
            native_funnel.walk(applied.hnsw_storage, applied.hnsw_native_walk),
            measured,
            recorded,
        )

    def _c2f_knobs(self, shortlist_dim: int, index: str) -> tuple[int, int | None]:
        """The shortlist factor and efSearch of a C2F search shortlisting at ``shortlist_dim``
        with ``index``: the walk's on the default prefix's graph, else the settings' factor
        and the common beam."""
        if (shortlist_dim, index) == (self.shortlist_dim, "hnsw"):
            return self.c2f_walk.factor, self.c2f_walk.ef_search
        return self.c2f_factor, None

    @property
    def dimensions(self) -> list[int]:
        """The prefix dimensions with indexes (coarse, shortlist, fine, as the layout built)."""
        return sorted(dim for dim, kinds in self.layout.items() if kinds)

    def plan(
        self,
        *,
        k: int | None,
        granularity: str,
        index: str | None,
        rerank: str,
        scoring: str,
        shortlist_dim: int | None = None,
        filter: object | None = None,
    ) -> SearchPlan:
        """Check the rules between a request's options, and the index kinds they need. Each
        option on its own (k's range, a built index kind, an enabled scoring, a trained and
        indexed shortlist prefix) is checked by the request model's rules
        (:mod:`service.limits`); ``filter`` is a decoded JSON object, or its JSON text (a query
        parameter)."""
        where = parse_where(filter)
        k = self.default_k if k is None else k
        index = index or self.index_kinds[0]
        if index not in self.index_kinds:  # a named collection may build fewer kinds
            raise InvalidRequest(
                f"index {index!r} is not built in this collection; built: "
                f"{', '.join(self.index_kinds)}",
                "index",
            )
        if scoring == "sfs" and granularity != COARSE and not self._at_fine(index):
            raise InvalidRequest(
                f"scoring 'sfs' needs a {index!r} index at the fine prefix, and none is built "
                "(set FRACTAL_FINE_INDEX_KINDS)",
                "scoring",
            )
        if rerank == "c2f" and scoring != "cosine":
            raise InvalidRequest("rerank 'c2f' re-ranks by cosine; use scoring=cosine", "rerank")
        if rerank == "c2f" and granularity == COARSE:
            raise InvalidRequest(
                "rerank 'c2f' answers at the fine dimension; use granularity fine or auto",
                "rerank",
            )
        c2f = granularity != COARSE and (
            rerank == "c2f" or (scoring == "cosine" and not self._at_fine(index))
        )
        if shortlist_dim is not None and not c2f:
            raise InvalidRequest(
                "shortlist_dim applies to rerank=c2f (with granularity fine or auto)",
                "shortlist_dim",
            )
        shortlist_dim = self.shortlist_dim if shortlist_dim is None else shortlist_dim
        if c2f:
            self._check_shortlist(shortlist_dim, index)
        return SearchPlan(k, granularity, index, rerank, scoring, shortlist_dim, where)

    def _check_shortlist(self, shortlist_dim: int, index: str) -> None:
        """C2F shortlists from an index of the requested kind at the shortlist prefix."""
        if index not in self.layout.get(shortlist_dim, ()):
            indexed = [dim for dim, kinds in self.layout.items() if index in kinds]
            raise InvalidRequest(
                f"C2F cannot shortlist at {shortlist_dim}-d: no {index!r} index is built there; "
                f"{index!r} indexes exist at {', '.join(map(str, indexed))} (the coarse and "
                "shortlist prefixes get FRACTAL_INDEX_KINDS, the fine one "
                "FRACTAL_FINE_INDEX_KINDS)",
                "shortlist_dim",
            )

    def _at_fine(self, index: str) -> bool:
        """Whether an ``index`` index is built at the fine prefix."""
        return index in self.layout.get(self.manifest.fine_dim, ())

    def _route(self, plan: SearchPlan, granularity: str) -> QueryPath:
        """The path a query of ``plan`` at ``granularity`` takes, decided once per plan shape."""
        key = (granularity, plan.k, plan.index, plan.rerank, plan.scoring, plan.shortlist_dim)
        route = self._routes.get(key)
        if route is None:
            route = self._routes[key] = self._decide_route(plan, granularity)
        return route

    def _decide_route(self, plan: SearchPlan, granularity: str) -> QueryPath:
        fine_by_c2f = plan.scoring == "cosine" and not self._at_fine(plan.index)
        if granularity == FINE and (plan.rerank == "c2f" or fine_by_c2f):
            return QueryPath(
                FINE,
                self.collection.dim,
                plan.index,
                "c2f",
                "cosine",
                shortlist_dimension=plan.shortlist_dim,
                shortlist_k=plan.k * self._c2f_knobs(plan.shortlist_dim, plan.index)[0],
            )
        dimension = self.manifest.granularity[granularity]
        return QueryPath(granularity, dimension, plan.index, "none", plan.scoring)

    def _search(self, route: QueryPath, vectors: np.ndarray, plan: SearchPlan) -> SearchResult:
        if route.rerank == "c2f":
            assert route.shortlist_dimension is not None
            factor, ef_search = self._c2f_knobs(route.shortlist_dimension, route.index)
            return self.collection.search_c2f(
                vectors,
                plan.k,
                route.shortlist_dimension,
                factor,
                route.index,
                ef_search=ef_search,
                where=plan.where,
                contents=True,
            )
        return self.collection.search(
            vectors,
            plan.k,
            route.dimension,
            route.index,
            route.scoring,
            ef_search=self.coarse_ef_search if route.granularity == COARSE else None,
            where=plan.where,
            contents=True,
        )

    @staticmethod
    def _matches(hits: list[list[Hit]]) -> list[list[Match]]:
        """Each query's hits as matches, with the text and metadata the search read with them
        (in the store query that named the hits; a document deleted meanwhile has none and
        is not a hit)."""
        return [
            [
                Match(hit.id, hit.score, hit.contents.text, hit.contents.metadata)
                for hit in row
                if hit.contents is not None
            ]
            for row in hits
        ]

    def run(self, vectors: np.ndarray, plan: SearchPlan) -> SearchOutcome:
        """Route and search every query (rows of full, unnormalised ``vectors``)."""
        started = time.perf_counter()
        if plan.granularity == AUTO:
            decisions: list[AutoDecision | None] = list(self.router.decide(vectors))
        else:
            decisions = [None] * len(vectors)
        routes = [
            self._route(plan, plan.granularity if decision is None else decision.granularity)
            for decision in decisions
        ]
        routed = time.perf_counter()
        groups: dict[QueryPath, list[int]] = defaultdict(list)
        for row, route in enumerate(routes):
            groups[route].append(row)
        hits: list[list[Hit]] = [[] for _ in routes]
        reports: list[FilterReport | None] = [None] * len(routes)
        rerank_seconds = 0.0
        for route, rows in groups.items():
            group_started = time.perf_counter()
            found = self._search(route, vectors[rows], plan)
            rerank_seconds += found.timings.get("rerank", 0.0)
            for position, (row, row_hits) in enumerate(zip(rows, found.hits, strict=True)):
                hits[row] = row_hits
                if found.filtering is not None:
                    reports[row] = _report(found.filtering, position)
            self.metrics.search_seconds.labels(
                dimension=str(route.dimension), index=route.index, rerank=route.rerank
            ).observe(time.perf_counter() - group_started)
        searched = time.perf_counter()
        results = [
            QueryResult(route, decision, matches, report)
            for route, decision, matches, report in zip(
                routes, decisions, self._matches(hits), reports, strict=True
            )
        ]
        return SearchOutcome(
            results,
            route_seconds=routed - started,
            search_seconds=searched - routed - rerank_seconds,
            rerank_seconds=rerank_seconds,
            fetch_seconds=time.perf_counter() - searched,
        )


def parse_where(value: object | None) -> Filter | None:
    """A request's ``filter`` (a decoded JSON object, or JSON text), or None; a bad one is a
    422 whose ``param`` is the JSON path of the offending part."""
    if value is None:
        return None
    try:
        return parse_filter_json(value) if isinstance(value, str) else parse_filter(value)
    except FilterError as exc:
        raise InvalidRequest(str(exc), exc.path) from None


def _report(filtering: Filtering, position: int) -> FilterReport:
    """The filter report of the ``position``-th query of one collection call."""
    return FilterReport(
        mode=filtering.get("mode", "exact_subset"),  # no match: nothing left to search
        matching=filtering.get("matching", 0),
        resolve_ms=1000.0 * filtering.get("resolve_seconds", 0.0),
        ef_search=filtering.get("ef_search"),
        fallback=position in filtering.get("fallback", ()),
    )
