"""What an index backend takes and answers with (:class:`index.backend.IndexBackend`), the same
for both backends: documents (:class:`Document`, :class:`Contents`), search hits, what a search
did (:class:`SearchResult`) and a collection's figures (:class:`CollectionStats`, with its
:class:`IndexStats` and how opening went, :class:`DiskRecovery` or :class:`ServerRecovery`)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

import numpy as np
import orjson


def parse_metadata(stored: str) -> dict:
    """A document's metadata from the JSON text it is stored as: read by orjson (about 6× the
    standard parser on a hit's few keys), or by the standard parser where orjson refuses what
    that one wrote (NaN, infinities, integers beyond 64 bits)."""
    try:
        return orjson.loads(stored)  # type: ignore[no-any-return]
    except orjson.JSONDecodeError:
        return json.loads(stored)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Document:
    """One document: a non-empty string id, its text, JSON metadata and its full vector."""

    id: str
    text: str
    vector: np.ndarray
    metadata: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"document ids must be non-empty strings, got {self.id!r}")
        if not isinstance(self.text, str):
            raise ValueError(f"document {self.id!r}: text must be a string")
        if not isinstance(self.metadata, dict):
            raise ValueError(f"document {self.id!r}: metadata must be a JSON object (a dict)")
        try:
            stored = json.dumps(self.metadata, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"document {self.id!r}: metadata is not JSON-serialisable: {exc}"
            ) from None
        for part, value in (("id", self.id), ("text", self.text), ("metadata", stored)):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate: no store can write it as UTF-8
                raise ValueError(
                    f"document {self.id!r}: its {part} is not valid Unicode (it holds a lone "
                    "surrogate)"
                ) from None


@dataclass(frozen=True, slots=True)
class Contents:
    """What a search hit shows of a stored document: its id, text and metadata (no vector)."""

    id: str
    text: str
    metadata: dict


class Figures(Mapping[str, Any]):
    """A frozen dataclass of figures that also reads as the plain mapping :meth:`as_dict` writes
    out (what ``/info`` shows, and what older callers index by key)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]  # every subclass is a dataclass

    def __getitem__(self, key: str) -> Any:
        return self.as_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.as_dict())

    def __len__(self) -> int:
        return len(self.as_dict())


@dataclass(slots=True)
class Hit:
    """One search result: a document id and its score (cosine or mean fragment cosine), and
    the document's text and metadata when the search was asked for them. Not frozen: a search
    makes one per hit, and a frozen dataclass takes three times as long to construct."""

    id: str
    score: float
    contents: Contents | None = None


class Timings(TypedDict, total=False):
    """Seconds of one search's index work, by step: ``search`` (a single-index search, listing
    a filter's rows and reading the hits' ids aside), ``funnel`` (C2F's shortlist and re-rank in
    one native call), or ``shortlist`` and ``rerank`` (C2F in two steps). Only the steps the
    search took are present."""

    search: float
    funnel: float
    shortlist: float
    rerank: float


class Filtering(TypedDict, total=False):
    """How a filtered search applied its filter: ``mode`` (``exact_subset``, ``selector``,
    ``scan``, or ``milvus``), ``matching`` (rows the filter matched; None where the engine does
    not tell), ``resolve_seconds`` (listing them), and for the embedded index paths ``ef_search``
    (HNSW) and ``fallback`` (the positions of the queries the exact subset answered instead). A
    filter that matches nothing leaves no ``mode``: nothing was searched."""

    mode: str
    matching: int | None
    resolve_seconds: float
    ef_search: int
    fallback: list[int]


@dataclass(slots=True)
class SearchResult:
    """What :meth:`~index.backend.IndexBackend.search` and ``search_c2f`` return: the hits of
    every query (best first), the seconds of each step, and how the filter was applied (None
    for a search without one). Not frozen, as :class:`Hit`: one is made per search."""

    hits: list[list[Hit]]
    timings: Timings = field(default_factory=lambda: Timings())
    filtering: Filtering | None = None


@dataclass(frozen=True)
class IndexStats(Figures):
    """One index of a collection: what it scores, at which prefix, with which kind, how many
    vectors and bytes it holds; ``codebooks`` (PQ only) whether its centroids came with the
    bundle or were trained here; ``details`` the kind's or backend's own figures (HNSW's
    tombstones, PQ's training, the Milvus field and index type).

    It reads as a mapping too, of every field (``codebooks`` when set) and every detail, which
    is what :meth:`as_dict` writes out."""

    scoring: str
    dim: int
    kind: str
    vectors: int
    bytes: int
    bytes_per_vector: int
    codebooks: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, scoring: str, figures: Mapping[str, Any]) -> IndexStats:
        """From a FAISS index kind's own figures (:meth:`index.faiss_indexes.VectorIndex.stats`)."""
        known = {"kind", "dim", "vectors", "bytes", "bytes_per_vector", "codebooks"}
        return cls(
            scoring=scoring,
            dim=figures["dim"],
            kind=figures["kind"],
            vectors=figures["vectors"],
            bytes=figures["bytes"],
            bytes_per_vector=figures["bytes_per_vector"],
            codebooks=figures.get("codebooks"),
            details={key: value for key, value in figures.items() if key not in known},
        )

    def as_dict(self) -> dict[str, Any]:
        """Every field (``codebooks`` when set) and every detail, as one plain dict."""
        figures: dict[str, Any] = {
            "scoring": self.scoring,
            "dim": self.dim,
            "kind": self.kind,
            "vectors": self.vectors,
            "bytes": self.bytes,
            "bytes_per_vector": self.bytes_per_vector,
        }
        if self.codebooks is not None:
            figures["codebooks"] = self.codebooks
        return figures | dict(self.details)


@dataclass(frozen=True)
class DiskRecovery(Figures):
    """How an embedded collection opened: the snapshot it used (its change counter, None
    without one), the indexes loaded from it, the store changes caught up since, the indexes
    rebuilt from the store (with why), and what became of the full vectors' file
    (:class:`~index.embedded.vector_file.VectorFileRecovery`'s fields)."""

    snapshot_counter: int | None
    loaded: list[str]
    caught_up_changes: int
    rebuilt: dict[str, str]
    full_vectors: dict[str, Any]

    def repairs(self) -> list[str]:
        """One line per derived file that opening found damaged or stale and rebuilt from the
        store; a missing snapshot (a new folder) is no news."""
        lines = [
            f"index {index} rebuilt from the store: {reason}"
            for index, reason in self.rebuilt.items()
            if reason != "no snapshot"
        ]
        vectors = self.full_vectors
        if vectors.get("action") == "rebuilt" and vectors.get("rows_written"):
            lines.append(f"full vectors' file rebuilt from the store: {vectors['reason']}")
        damaged = vectors.get("corrupt") or ()
        if damaged:
            listed = ", ".join(repr(doc_id) for doc_id in damaged[:5])
            lines.append(
                f"{len(damaged)} stored vector(s) fail their checksum ({listed}): written as "
                "zeros, never served; upsert those documents again or delete them"
            )
        return lines


@dataclass(frozen=True)
class ServerRecovery(Figures):
    """How a collection held by a server opened: the backend, the server's address (without
    credentials) and the collection's name there. The server recovers its own files."""

    backend: str
    uri: str
    collection: str

    def repairs(self) -> list[str]:
        """Nothing: the server repairs its own files."""
        return []


@dataclass(frozen=True)
class CollectionStats:
    """A collection's documents and indexes at one moment (``IndexBackend.stats``)."""

    documents: int
    dim: int
    prefix_dims: list[int]
    fragment_dim: int | None
    change_counter: int | None
    """The store change the indexes reflect; None while a write is updating them (and on
    Milvus, which keeps no such counter)."""
    indexes: dict[str, IndexStats]
    """By index name (``cosine-64-hnsw``)."""
    recovery: DiskRecovery | ServerRecovery
    """How opening went (``/info`` shows it as a mapping)."""
    full_vectors: dict[str, Any]
    """The full vectors' storage: dtype, file or field, and bytes."""
    ingest_seconds: dict[str, float]
    """Time spent by upserts since opening: committing to the store, writing the full vectors,
    and adding to (and rebuilding) the indexes, i.e. the graph build."""
