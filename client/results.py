"""The service's answers as typed values: search results (hits, route, timings), embeddings,
documents and collections. Each is built from the JSON the service returns (``from_json``);
the fields are those of the OpenAPI contract (``openapi/openapi.json``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Hit:
    """One document a search found, with its cosine similarity to the query."""

    id: str
    score: float
    text: str
    metadata: dict[str, Any]

    @classmethod
    def from_json(cls, hit: dict[str, Any]) -> Hit:
        return cls(hit["id"], float(hit["score"]), hit["text"], hit["metadata"])


@dataclass(frozen=True)
class Route:
    """How the service answered a query: the granularity it used (``auto`` decides per query),
    the prefix dimension and index searched, and the re-ranking and scoring applied.
    ``auto`` and ``filter`` hold the auto router's decision and the filter's plan, when used."""

    requested_granularity: str
    granularity: str
    dimension: int
    index: str
    rerank: str
    scoring: str
    shortlist_dimension: int | None = None
    shortlist_k: int | None = None
    auto: dict[str, Any] | None = None
    filter: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, route: dict[str, Any]) -> Route:
        fields: dict[str, Any] = {name: route.get(name) for name in cls.__dataclass_fields__}
        return cls(**fields)


@dataclass(frozen=True)
class Timings:
    """Milliseconds the service spent on each stage of a search (of the whole batch, for a
    batch search)."""

    encode: float
    route: float
    search: float
    rerank: float
    fetch: float

    @classmethod
    def from_json(cls, timings: dict[str, Any]) -> Timings:
        return cls(**{name: float(timings[name]) for name in cls.__dataclass_fields__})

    @property
    def total(self) -> float:
        return self.encode + self.route + self.search + self.rerank + self.fetch


@dataclass(frozen=True)
class SearchResult:
    """One query's answer: its hits, best first, the route taken and the stage timings."""

    query: str
    hits: list[Hit]
    route: Route
    timings_ms: Timings

    @classmethod
    def from_json(cls, result: dict[str, Any], timings: dict[str, Any]) -> SearchResult:
        return cls(
            result["query"],
            [Hit.from_json(hit) for hit in result["hits"]],
            Route.from_json(result["route"]),
            Timings.from_json(timings),
        )

    @property
    def ids(self) -> list[str]:
        """The hits' document ids, best first."""
        return [hit.id for hit in self.hits]


@dataclass(frozen=True)
class Embeddings:
    """``POST /embed``'s answer: for each text, in order, one vector per requested prefix
    dimension (``vectors[i][dim]``)."""

    model: str
    dims: list[int]
    normalized: bool
    vectors: list[dict[int, list[float]]] = field(repr=False)

    @classmethod
    def from_json(cls, answer: dict[str, Any]) -> Embeddings:
        data = sorted(answer["data"], key=lambda item: item["index"])
        vectors = [
            {prefix["dim"]: prefix["vector"] for prefix in item["embeddings"]} for item in data
        ]
        return cls(answer["model"], list(answer["dims"]), bool(answer["normalized"]), vectors)

    def at(self, dim: int | None = None) -> list[list[float]]:
        """Every text's vector at prefix ``dim`` (default: the only, or the largest, asked)."""
        if not self.vectors:
            return []
        chosen = max(self.dims) if dim is None else dim
        return [by_dim[chosen] for by_dim in self.vectors]


@dataclass(frozen=True)
class Document:
    """A stored document: its id, text and metadata."""

    id: str
    text: str
    metadata: dict[str, Any]

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> Document:
        return cls(document["id"], document["text"], document["metadata"])


@dataclass(frozen=True)
class Collection:
    """A named collection: whether it is the default one, its index kinds and its size."""

    name: str
    default: bool
    index_kinds: list[str]
    documents: int

    @classmethod
    def from_json(cls, collection: dict[str, Any]) -> Collection:
        return cls(
            collection["name"],
            bool(collection["default"]),
            list(collection["index_kinds"]),
            int(collection["documents"]),
        )
