"""``/search``: one query (``GET``) or several (``POST``), each answered with its route."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Query, Request
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, WithJsonSchema

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
from service.routes import JSON_BODY, FromAttributes, encodes_texts, new_router
from service.runtime import Runtime, RuntimeDep
from service.search import QueryResult, SearchOutcome

router = new_router(tags=["search"])

FILTER_SCHEMA_REF = "#/components/schemas/MetadataFilter"

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


FILTER_GRAMMAR = (
    "Keep only documents whose metadata match: a condition "
    '{"key": K, OP: V} with OP one of eq (a string, number or boolean), in (a list of 1-1,024 '
    "of them), gt / gte / lt / lte (a number or a string; a lower and an upper bound may be "
    'combined), exists (true / false); or {"and": [...]}, {"or": [...]} (1-64 filters), '
    '{"not": filter}. K is a metadata key, a dotted path for nested objects ("user.country"); '
    "a list value matches when one of its elements does; values of different types never "
    "compare equal. At most 8 levels, 64 conditions and 4,096 values in all the in lists. "
    "Applied inside the index search on "
    "every route, so k hits come back whenever k documents match; the route says how "
    "(route.filter). A bad filter is a 422 whose param is the JSON path of the offending part "
    "(e.g. filter.and[1].gte)."
)


class SearchQuery(SearchOptions):
    q: Text = Field(description="The query text (at most FRACTAL_MAX_CHARS characters).")
    filter: str | None = Field(
        None,
        description="A metadata filter as JSON text (URL-encoded), e.g. "
        '{"key":"class","eq":"Business"}. ' + FILTER_GRAMMAR,
    )


class SearchBatch(SearchOptions):
    model_config = JSON_BODY

    queries: TextList = Field(
        min_length=1,
        description="At most FRACTAL_MAX_TEXTS queries of at most FRACTAL_MAX_CHARS characters.",
    )
    filter: Annotated[
        dict[str, Any] | None,
        WithJsonSchema({"anyOf": [{"$ref": FILTER_SCHEMA_REF}, {"type": "null"}]}),
    ] = Field(
        None,
        description="A metadata filter, applied to every query, e.g. "
        '{"and": [{"key": "class", "eq": "Business"}, {"key": "year", "gte": 2020}]}. '
        + FILTER_GRAMMAR,
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


class FilterRouteOut(FromAttributes):
    """How the metadata filter was applied to this query."""

    mode: Literal["exact_subset", "selector", "scan", "milvus"] = Field(
        description="exact_subset: exact scores of the matching documents alone (few match); "
        "selector: the HNSW graph walked with the matching ids as its FAISS IDSelector and a "
        "raised efSearch; scan: the exact or PQ index's exhaustive scan, keeping the matching "
        "documents; milvus: the filter as a Milvus expression, applied inside Milvus's search "
        "(FRACTAL_INDEX_BACKEND=milvus)."
    )
    matching: int | None = Field(
        description="Documents the filter matched (null on the milvus backend, which does not "
        "count them)."
    )
    resolve_ms: float = Field(
        description="Time to list the matching documents from the store's metadata index "
        "(next to nothing when the same filter was listed since the last write)."
    )
    ef_search: int | None = Field(None, description="selector on HNSW: the efSearch used.")
    fallback: bool = Field(
        False,
        description="selector: the walk found fewer than k matching documents for this query, "
        "so the exact subset answered it.",
    )


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
    filter: FilterRouteOut | None = Field(None, description="With a filter: how it was applied.")


class QueryResultOut(BaseModel):
    query: str
    route: RouteOut
    hits: list[HitOut]


class Timings(BaseModel):
    """Milliseconds. encode includes the wait in the encoder queue; route is auto's head call;
    search is the index calls (an embedded c2f's shortlist and re-rank are one native call,
    counted here); rerank is c2f's exact re-rank at the full dimension where it is a step of its
    own (Milvus, a filtered scan; else 0); fetch assembles the matches (their texts and metadata
    are read in the store query that names the hits, counted in search)."""

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
    route = {
        **vars(result.route),  # its fields; auto and filter are read from their attributes
        "requested_granularity": requested,
        "auto": result.auto,
        "filter": result.filter,
    }
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
    options: SearchQuery | SearchBatch,
) -> tuple[list[QueryResultOut], Timings]:
    hosted = await runtime.collection_named(options.collection)
    plan = hosted.searcher.plan(
        k=options.k,
        granularity=options.granularity,
        index=options.index,
        rerank=options.rerank,
        scoring=options.scoring,
        shortlist_dim=options.shortlist_dim,
        filter=options.filter,
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


@router.get("/search", responses=error_responses(404, 422, 429, 503, 504))
@encodes_texts
async def search(
    params: Annotated[SearchQuery, Query()], runtime: RuntimeDep, request: Request
) -> SearchResponse:
    """Search the documents with one query."""
    (result,), timings = await _run(runtime, request, [params.q], params)
    return SearchResponse(
        query=result.query, route=result.route, hits=result.hits, timings_ms=timings
    )


@router.post("/search", responses=error_responses(404, 422, 429, 503, 504))
@encodes_texts
async def search_batch(
    body: SearchBatch, runtime: RuntimeDep, request: Request
) -> BatchSearchResponse:
    """Search the documents with several queries sharing the same options."""
    results, timings = await _run(runtime, request, body.queries, body)
    return BatchSearchResponse(results=results, timings_ms=timings)
