"""``/search``: one query (``GET``) or several (``POST``), each answered with its route."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from service.errors import error_responses
from service.limits import (
    BuiltIndex,
    EnabledScoring,
    IndexedPrefix,
    JsonInt,
    Text,
    TextList,
    TopK,
)
from service.metrics import label_request
from service.routes import JSON_BODY, FromAttributes
from service.runtime import Runtime, RuntimeDep
from service.search import QueryResult, SearchOutcome

router = APIRouter(tags=["search"])

MS = 1000.0


class SearchOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    k: Annotated[JsonInt, TopK()] | None = Field(
        None, description="Hits per query, 1..FRACTAL_MAX_K (default FRACTAL_DEFAULT_K)."
    )
    granularity: Literal["coarse", "fine", "auto"] = Field(
        "fine",
        description="coarse: the bundle's coarse prefix; fine: its fine dimension; auto: chosen "
        "per query by the bundle's heads (fine without heads).",
    )
    index: Annotated[Literal["exact", "hnsw", "pq"], BuiltIndex()] | None = Field(
        None, description="Index kind, one of those built (default: the first built)."
    )
    rerank: Literal["none", "c2f"] = Field(
        "none",
        description="c2f: shortlist k × FRACTAL_C2F_FACTOR at the shortlist prefix, re-rank "
        "exactly at the full dimension; with granularity fine or auto, and scoring cosine.",
    )
    shortlist_dim: Annotated[JsonInt, IndexedPrefix()] | None = Field(
        None,
        description="c2f: the prefix to shortlist at, a trained prefix with an index of the "
        "requested kind (default: the bundle's measured shortlist prefix, /info "
        "resolutions.shortlist_dim). Only with rerank=c2f (or fine queries that C2F answers "
        "because the fine prefix has no index).",
    )
    scoring: Annotated[Literal["cosine", "sfs"], EnabledScoring()] = Field(
        "cosine",
        description="sfs: mean fragment cosine (needs SFS enabled, and for fine queries an "
        "index of the requested kind at the fine prefix).",
    )
    collection: str | None = Field(
        None,
        description="The collection to search (GET /collections lists them); default: the "
        "unnamed default collection, also called 'default'.",
    )


class SearchQuery(SearchOptions):
    q: Text = Field(description="The query text (at most FRACTAL_MAX_CHARS characters).")


class SearchBatch(SearchOptions):
    model_config = JSON_BODY

    queries: TextList = Field(
        min_length=1,
        description="At most FRACTAL_MAX_TEXTS queries of at most FRACTAL_MAX_CHARS characters.",
    )


class HitOut(FromAttributes):
    id: str
    score: float = Field(description="Cosine (or mean fragment cosine) at the route's dimension.")
    text: str
    metadata: dict[str, Any]


class AutoRouteOut(FromAttributes):
    """What granularity=auto decided, and the head confidences (max softmax) it used."""

    decision: Literal["coarse", "fine"] = Field(
        validation_alias=AliasChoices("decision", "granularity")  # AutoDecision.granularity
    )
    reason: str
    coarse_label: str | None
    coarse_confidence: float | None
    fine_label: str | None = Field(
        description="The fine head's label, as its path from the root (e.g. 'banking / balance')."
    )
    fine_confidence: float | None


class RouteOut(FromAttributes):
    """The path a query actually took."""

    requested_granularity: Literal["coarse", "fine", "auto"]
    granularity: Literal["coarse", "fine"]
    dimension: int = Field(description="Dimension the scores were computed at.")
    index: str
    rerank: Literal["none", "c2f"]
    scoring: Literal["cosine", "sfs"]
    shortlist_dimension: int | None = Field(
        None, description="c2f: the prefix the shortlist was taken at."
    )
    shortlist_k: int | None = Field(None, description="c2f: the shortlist's size.")
    auto: AutoRouteOut | None = None


class QueryResultOut(BaseModel):
    query: str
    route: RouteOut
    hits: list[HitOut]


class Timings(BaseModel):
    """Milliseconds. encode includes the wait in the encoder queue; route is auto's head call;
    search is the index calls (for c2f the shortlist); rerank is c2f's exact re-rank at
    the full dimension (0 without c2f); fetch reads the hits' texts and metadata from the store."""

    encode: float
    route: float
    search: float
    rerank: float
    fetch: float


class SearchResponse(QueryResultOut):
    timings_ms: Timings


class BatchSearchResponse(BaseModel):
    results: list[QueryResultOut]
    timings_ms: Timings


def _result(query: str, requested: str, result: QueryResult) -> QueryResultOut:
    route = {**asdict(result.route), "requested_granularity": requested, "auto": result.auto}
    return QueryResultOut(query=query, route=RouteOut.model_validate(route), hits=result.matches)


def _timings(outcome: SearchOutcome, encode_seconds: float) -> Timings:
    return Timings(
        encode=encode_seconds * MS,
        route=outcome.route_seconds * MS,
        search=outcome.search_seconds * MS,
        rerank=outcome.rerank_seconds * MS,
        fetch=outcome.fetch_seconds * MS,
    )


async def _run(
    runtime: Runtime,
    request: Request,
    queries: list[str],
    options: SearchOptions,
) -> tuple[list[QueryResultOut], Timings]:
    plan = runtime.collections.get(options.collection).searcher.plan(
        k=options.k,
        granularity=options.granularity,
        index=options.index,
        rerank=options.rerank,
        scoring=options.scoring,
        shortlist_dim=options.shortlist_dim,
    )
    outcome, encode_seconds = await runtime.search(queries, plan, collection=options.collection)
    dimensions = {result.route.dimension for result in outcome.results}
    label_request(
        request,
        granularity=options.granularity,
        dimension=str(dimensions.pop()) if len(dimensions) == 1 else "mixed",
        index=plan.index,
    )
    results = [
        _result(query, options.granularity, result)
        for query, result in zip(queries, outcome.results, strict=True)
    ]
    return results, _timings(outcome, encode_seconds)


@router.get("/search", responses=error_responses(404, 422, 429, 503))
async def search(
    params: Annotated[SearchQuery, Query()], runtime: RuntimeDep, request: Request
) -> SearchResponse:
    """Search the documents with one query."""
    (result,), timings = await _run(runtime, request, [params.q], params)
    return SearchResponse(**result.model_dump(), timings_ms=timings)


@router.post("/search", responses=error_responses(404, 422, 429, 503))
async def search_batch(
    body: SearchBatch, runtime: RuntimeDep, request: Request
) -> BatchSearchResponse:
    """Search the documents with several queries sharing the same options."""
    results, timings = await _run(runtime, request, body.queries, body)
    return BatchSearchResponse(results=results, timings_ms=timings)
