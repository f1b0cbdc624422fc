"""The Milvus index backend: a collection held by a Milvus server, so that any number of stateless
service replicas serve one corpus.

One Fractal collection is one Milvus collection with these fields:

- ``key``: the primary key, the lowercase hex of the document id's UTF-8. Ids are free text, and
  Milvus expressions have no escape for every character an id may hold; the hex needs none and
  is decoded back to the id on every read.
- ``text`` and ``metadata`` (its JSON text): what a hit shows, returned as given.
- ``filterable``: the metadata in the form filters are evaluated on (:mod:`index.milvus_filters`,
  the same grammar and matches as the embedded backend).
- ``full``: the full vector, L2-normalised, with an exact (FLAT) index. C2F re-ranks with it, and
  it is the exact index at the full dimension.
- one vector field per other (scoring, prefix dimension, index kind) of the layout, named
  ``cosine_64_hnsw`` or ``sfs_256_exact``: the prefix L2-normalised (cosine) or
  fragment-normalised (SFS), each with its own index, all by inner product. Milvus indexes a
  field once, so two kinds at one prefix are two fields.

Index kinds map to Milvus index types: ``exact`` → FLAT, ``hnsw`` → :attr:`MilvusParams.ann_index`
(HNSW by default; HNSW_SQ, IVF_FLAT, IVF_SQ8 as settings), ``pq`` → IVF_PQ where the server
builds it. milvus-lite accepts an IVF_PQ index but searches such a field by brute force (it logs
that it cannot build one), so against milvus-lite the kind is refused when the collection opens.

Routes: coarse and fine are single-field searches; C2F shortlists ``k × factor`` on the
shortlist prefix's field, the search returning each shortlisted document's ``full`` vector with
it, and re-ranks them exactly here (one request and one consistent read per query batch, where
a second request by key would read the rows again); SFS searches its fragment-normalised field.
A filter becomes a Milvus expression over ``filterable`` and is applied inside every search.

Consistency and durability are Milvus's. The collection is created with, and every search and
read asks for, **Strong** consistency: a read sees every write Milvus acknowledged before it,
through any replica. An upsert returns once Milvus acknowledged it. A large upsert is sent in
chunks of :data:`UPSERT_CHUNK` documents, each acknowledged on its own; an upsert cut short is
completed by sending it again (upserts replace by id).

Every call has a deadline; a server that is down or slow is :class:`BackendUnavailable` (the
service answers 503), a collection another replica dropped is :class:`CollectionMissing`.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from index.backend import BackendUnavailable, CollectionMissing, DocumentRefused
from index.collection import check_count, check_layout, checked_documents
from index.filters import Filter
from index.fragments import check_fragment_dim, in_space
from index.kinds import KINDS, HnswParams, PqParams
from index.milvus_filters import UnfilterableMetadata, expression, filterable
from index.rerank import rerank
from index.store import Contents
from index.types import CollectionStats, Filtering, Hit, IndexStats, SearchResult, Timings
from index.vectors import as_matrix, prefix_unit, unit_rows

if TYPE_CHECKING:
    from pymilvus import MilvusClient

logger = logging.getLogger("index.milvus")

KEY = "key"
FULL = "full"
FILTERABLE = "filterable"
MAX_KEY_CHARS = 4_096
"""The hex key of an id of at most 2,048 bytes of UTF-8."""
MAX_TEXT_BYTES = 65_535
"""Milvus's VARCHAR limit, for the text and for the metadata's JSON text."""
UPSERT_CHUNK = 1_000
"""Documents per upsert request: a 384-d document with four prefix fields is about 6 KB, so a
chunk stays far below gRPC's message limit."""
READ_CHUNK = 1_000
"""Keys per read (an ``in`` expression)."""
C2F_ROWS_PER_SEARCH = 16_384
"""Shortlisted rows (each with its full vector) one C2F search request returns at most: 16 MB
of 256-d vectors, far below gRPC's message limit; more queries are sent in several requests."""
HEALTH_TTL_S = 1.0
"""How long a health check's answer is reused (``/ready`` may be polled often)."""
RECORD_POLL_S = 0.1
"""How often a collection another replica is creating is asked for its record."""
RECONNECT_BACKOFF_MS = 1_000
RECONNECT_OPTIONS = {
    "grpc.initial_reconnect_backoff_ms": RECONNECT_BACKOFF_MS,
    "grpc.max_reconnect_backoff_ms": RECONNECT_BACKOFF_MS,
}
"""gRPC channel options: a lost server is tried again every second. gRPC's own backoff grows
to two minutes (pymilvus shares one channel per server, so a new client waits it out too): a
replica would answer 503 for up to that long after Milvus came back."""
PROPERTY = "fractal.record"
"""The collection property holding its Fractal record: name, bundle, dimensions, index kinds."""
COLLECTION_MISSING = 100
NOT_LOADED = 101
ANN_INDEXES = ("HNSW", "HNSW_SQ", "IVF_FLAT", "IVF_SQ8")

T = TypeVar("T")


@dataclass(frozen=True)
class MilvusParams:
    """How fields are indexed and searched: the type behind kind ``hnsw``, the HNSW and PQ
    parameters of the service's settings, IVF lists and probes, and every call's deadline."""

    ann_index: str = "HNSW"
    hnsw: HnswParams = field(default_factory=HnswParams)
    pq: PqParams = field(default_factory=PqParams)
    nlist: int = 1024
    nprobe: int = 32
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.ann_index not in ANN_INDEXES:
            raise ValueError(f"ann_index must be one of {', '.join(ANN_INDEXES)}")

    def index(self, kind: str, dim: int) -> tuple[str, dict[str, Any]]:
        """The Milvus index type and build parameters of an index kind."""
        if kind == "exact":
            return "FLAT", {}
        if kind == "pq":
            self.pq.check_dim(dim)
            return "IVF_PQ", {"nlist": self.nlist, "m": self.pq.m, "nbits": self.pq.nbits}
        if self.ann_index.startswith("HNSW"):
            built = {"M": self.hnsw.m, "efConstruction": self.hnsw.ef_construction}
            return self.ann_index, built | ({"sq_type": "SQ8"} if "SQ" in self.ann_index else {})
        return self.ann_index, {"nlist": self.nlist}

    def search(self, kind: str, k: int, ef_search: int | None) -> dict[str, Any]:
        """The search parameters of an index kind for ``k`` results."""
        if kind == "exact":
            params: dict[str, Any] = {}
        elif kind == "hnsw" and self.ann_index.startswith("HNSW"):
            params = {"ef": max(ef_search or self.hnsw.ef_search, k)}
        else:
            params = {"nprobe": self.nprobe}
        return {"metric_type": "IP", "params": params}


class MilvusConnection:
    """One client of a Milvus server, shared by every collection of a service, made on first
    use (and again after a failure). ``on_error`` is told the operation of every failed call (the
    service counts them)."""

    def __init__(
        self,
        uri: str,
        token: str | None,
        timeout_s: float,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self._uri = uri
        self.uri = re.sub(r"//[^/@]*@", "//", uri)
        """The address as messages show it: without a ``user:password@`` part."""
        self._token = token or None
        self.timeout_s = timeout_s
        self._on_error = on_error
        self._client: MilvusClient | None = None
        self._lock = threading.Lock()
        self._health: tuple[float, str | None] = (-HEALTH_TTL_S, None)

    def _connected(self) -> MilvusClient:
        with self._lock:
            if self._client is None:
                from pymilvus import MilvusClient

                logging.getLogger("pymilvus").setLevel(logging.CRITICAL)  # errors are ours
                self._client = MilvusClient(
                    uri=self._uri,
                    token=self._token or "",
                    timeout=self.timeout_s,
                    grpc_options=RECONNECT_OPTIONS,
                )
            return self._client

    def call(self, operation: str, action: Callable[[MilvusClient], T]) -> T:
        """``action(client)``; a Milvus or connection failure becomes :class:`BackendUnavailable`
        (or :class:`CollectionMissing`, or :class:`NotLoaded`), counted by ``on_error``."""
        from pymilvus.exceptions import MilvusException

        try:
            return action(self._connected())
        except MilvusException as exc:
            code = getattr(exc, "code", None)
            if code == COLLECTION_MISSING:
                raise CollectionMissing(exc.message) from None
            if code == NOT_LOADED:
                raise NotLoaded(exc.message) from None
            failure = f"Milvus at {self.uri}: {operation} failed: {exc.message}"
        except Exception as exc:  # grpc and socket errors come in many types
            failure = f"Milvus at {self.uri}: {operation} failed: {type(exc).__name__}: {exc}"
        self.close()  # the next call takes a new client; the channel retries on its own
        if self._on_error is not None:
            self._on_error(operation)
        logger.warning("%s", failure)
        raise BackendUnavailable(failure.splitlines()[0])

    def problem(self) -> str | None:
        """None while the server answers, else why not (checked at most once a second)."""
        checked_at, problem = self._health
        if time.monotonic() - checked_at < HEALTH_TTL_S:
            return problem
        try:
            self.call("list_collections", lambda client: client.list_collections())
            problem = None
        except BackendUnavailable as exc:
            problem = str(exc)
        self._health = (time.monotonic(), problem)
        return problem

    def server_version(self) -> str:
        return self.call("get_server_version", lambda client: client.get_server_version())

    def wait(self, timeout_s: float) -> None:
        """Return once the server answers; :class:`BackendUnavailable` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.call("list_collections", lambda client: client.list_collections())
                return
            except BackendUnavailable:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # a client of a dead server may fail to close; it is dropped
                logger.debug("closing the Milvus client failed", exc_info=True)


class NotLoaded(BackendUnavailable):
    """The collection is not loaded into the server's memory (milvus-lite after a restart)."""


def key_of(doc_id: str) -> str:
    return doc_id.encode("utf-8").hex()


def id_of(key: str) -> str:
    return bytes.fromhex(key).decode("utf-8")


def _keys_expression(keys: Sequence[str]) -> str:
    return f"{KEY} in [{', '.join(f'{chr(34)}{key}{chr(34)}' for key in keys)}]"


@dataclass(frozen=True)
class VectorField:
    """One vector field: its name, scoring, prefix dimension and index kind."""

    name: str
    scoring: str
    dim: int
    kind: str


class MilvusCollection:
    """A Fractal collection in a Milvus server (see the module docstring); implements
    :class:`index.backend.IndexBackend`.

    ``record`` says what the collection is (its Fractal name, the bundle that made its vectors,
    its index kinds); it is stored as a collection property when the collection is created, and
    a collection found with another bundle's record or another layout is refused with
    :class:`ValueError`. With ``create=False`` a missing collection is :class:`CollectionMissing`.
    """

    def __init__(
        self,
        connection: MilvusConnection,
        name: str,
        *,
        dim: int,
        prefix_dims: Sequence[int],
        layout: dict[int, tuple[str, ...]],
        record: dict[str, Any],
        params: MilvusParams | None = None,
        fragment_dim: int | None = None,
        create: bool = True,
    ) -> None:
        check_count(dim, "dim")
        self.connection = connection
        self.name = name
        self.dim = dim
        self.prefix_dims = tuple(sorted(set(prefix_dims)))
        self.layout = check_layout(layout, self.prefix_dims)
        self.index_kinds = tuple(k for k in KINDS if any(k in v for v in self.layout.values()))
        self.fragment_dim = fragment_dim
        if fragment_dim is not None:
            for prefix_dim in self.prefix_dims:
                check_fragment_dim(prefix_dim, fragment_dim)
        self.params = params or MilvusParams()
        self.record = {**record, "dim": dim, "fields": [asdict(f) for f in self._fields()]}
        self.opened_with_work = False
        self._ingest_seconds = {"store": 0.0, "full_vectors": 0.0, "indexes": 0.0}
        if "pq" in self.index_kinds and "lite" in connection.server_version().lower():
            raise ValueError(
                f"index kind 'pq' needs IVF_PQ, which the Milvus server at {connection.uri} "
                f"({connection.server_version()}) does not build (milvus-lite builds no PQ "
                "index); use the kinds exact and hnsw, or Milvus standalone or distributed"
            )
        exists = self._call("has_collection", lambda c: c.has_collection(name))
        if exists:
            self._check_record()
        elif create:
            self._create()
        else:
            raise CollectionMissing(f"collection {name!r} does not exist in Milvus")
        self._call("load_collection", lambda c: c.load_collection(name))

    # -- schema ----------------------------------------------------------------------------

    def _fields(self) -> list[VectorField]:
        """``full``, then one field per (scoring, prefix, kind) other than the exact index at
        the full dimension, which ``full`` is."""
        scorings = ("cosine", "sfs") if self.fragment_dim is not None else ("cosine",)
        fields = [VectorField(FULL, "cosine", self.dim, "exact")]
        for scoring in scorings:
            for prefix_dim, kinds in self.layout.items():
                for kind in kinds:
                    if (scoring, prefix_dim, kind) != ("cosine", self.dim, "exact"):
                        name = f"{scoring}_{prefix_dim}_{kind}"
                        fields.append(VectorField(name, scoring, prefix_dim, kind))
        return fields

    def _field(self, scoring: str, dim: int, kind: str) -> VectorField:
        for candidate in self._fields():
            if (candidate.scoring, candidate.dim, candidate.kind) == (scoring, dim, kind):
                return candidate
        served = ", ".join(f"{f.scoring}-{f.dim}-{f.kind}" for f in self._fields())
        raise ValueError(
            f"no {kind!r} index for scoring {scoring!r} at dim {dim!r}; served: {served}"
        )

    def _create(self) -> None:
        from pymilvus import DataType, MilvusClient

        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field(KEY, DataType.VARCHAR, is_primary=True, max_length=MAX_KEY_CHARS)
        schema.add_field("text", DataType.VARCHAR, max_length=MAX_TEXT_BYTES)
        schema.add_field("metadata", DataType.VARCHAR, max_length=MAX_TEXT_BYTES)
        schema.add_field(FILTERABLE, DataType.JSON)
        indexes = MilvusClient.prepare_index_params()
        for vector in self._fields():
            schema.add_field(vector.name, DataType.FLOAT_VECTOR, dim=vector.dim)
            index_type, built = self.params.index(vector.kind, vector.dim)
            indexes.add_index(vector.name, index_type=index_type, metric_type="IP", params=built)
        try:
            self._call(
                "create_collection",
                lambda c: c.create_collection(
                    self.name, schema=schema, index_params=indexes, consistency_level="Strong"
                ),
            )
        except BackendUnavailable:
            if not self._call("has_collection", lambda c: c.has_collection(self.name)):
                raise
            self._check_record()  # another replica created it first: its record decides
            return
        # The record is written last: until it is there, the collection is being created.
        self._call(
            "alter_collection_properties",
            lambda c: c.alter_collection_properties(
                self.name, properties={PROPERTY: json.dumps(self.record, sort_keys=True)}
            ),
        )

    def _check_record(self) -> None:
        """Refuse a collection with another bundle's record or another layout. One without a
        record is being created by another replica (the record is its last step): its record
        is waited for, up to a call's deadline, before the collection is refused as not
        Fractal's."""
        deadline = time.monotonic() + self.params.timeout_s
        while (found := stored_record(self.connection, self.name)) is None:
            if time.monotonic() >= deadline:
                break
            time.sleep(RECORD_POLL_S)
        if found is None:
            raise ValueError(
                f"Milvus collection {self.name!r} was not made by Fractal (it has no "
                f"{PROPERTY} property); use another FRACTAL_MILVUS_PREFIX"
            )
        if found.get("bundle_hash") != self.record.get("bundle_hash"):
            raise ValueError(
                f"Milvus collection {self.name!r} holds vectors of bundle "
                f"{found.get('bundle')!r} ({str(found.get('bundle_hash'))[:12]}), not of the "
                f"served bundle {self.record.get('bundle')!r} "
                f"({str(self.record.get('bundle_hash'))[:12]}); use another "
                "FRACTAL_MILVUS_PREFIX or re-ingest"
            )
        if found.get("fields") != self.record["fields"]:
            have = ", ".join(f["name"] for f in found.get("fields", []))
            want = ", ".join(f["name"] for f in self.record["fields"])
            raise ValueError(
                f"Milvus collection {self.name!r} has the vector fields {have}, the settings "
                f"need {want} (index kinds, SFS or the shortlist prefix changed); use another "
                "FRACTAL_MILVUS_PREFIX or the settings it was made with"
            )

    def _call(self, operation: str, action: Callable[[MilvusClient], T]) -> T:
        """A call on this collection; one that finds it not loaded loads it and tries again."""
        try:
            return self.connection.call(operation, action)
        except NotLoaded:
            self.connection.call("load_collection", lambda c: c.load_collection(self.name))
            return self.connection.call(operation, action)

    # -- writing ---------------------------------------------------------------------------

    def _checked_rows(
        self, ids: Sequence[str], texts: Sequence[str], metadata: list[dict]
    ) -> list[dict[str, Any]]:
        """The Milvus rows of checked documents, without their vectors; :class:`DocumentRefused`
        for one Milvus cannot hold."""
        rows = []
        for position, (doc_id, text, meta) in enumerate(zip(ids, texts, metadata, strict=True)):
            meta_text = json.dumps(meta, ensure_ascii=False)
            for what, value in (("text", text), ("metadata", meta_text)):
                size = len(value.encode("utf-8"))
                if size > MAX_TEXT_BYTES:
                    raise DocumentRefused(
                        position,
                        what,
                        f"the {what} takes {size:,} bytes of UTF-8; the Milvus backend stores "
                        f"at most {MAX_TEXT_BYTES:,}",
                    )
            try:
                matches = filterable(meta)
            except UnfilterableMetadata as exc:
                raise DocumentRefused(position, "metadata", str(exc)) from None
            rows.append(
                {KEY: key_of(doc_id), "text": text, "metadata": meta_text, FILTERABLE: matches}
            )
        return rows

    def _with_vectors(self, rows: list[dict[str, Any]], unit: np.ndarray) -> list[dict[str, Any]]:
        """Copies of ``rows`` with every vector field of their unit vectors ``unit``, as lists."""
        chunk = [dict(row) for row in rows]
        for vector in self._fields():
            values = in_space(vector.scoring, vector.dim, unit, self.fragment_dim).tolist()
            for row, value in zip(chunk, values, strict=True):
                row[vector.name] = value
        return chunk

    def upsert(
        self,
        ids: Sequence[str],
        texts: Sequence[str],
        vectors: np.ndarray,
        metadata: Sequence[dict] | None = None,
    ) -> int:
        """Store or replace documents; acknowledged by Milvus when this returns. Every document
        is checked before any is sent. Returns how many were written.

        The vector fields of a chunk are made just before it is sent: as Python lists (what the
        client sends), all of a large upsert's would take about 32 bytes per number, 3 GB for
        100,000 documents of 256 + 64 + 64 + 192 + 192 + 256 numbers."""
        documents, matrix = checked_documents(ids, texts, vectors, metadata, self.dim)
        started = time.perf_counter()
        rows = self._checked_rows(
            [d.id for d in documents], [d.text for d in documents], [d.metadata for d in documents]
        )
        unit = unit_rows(matrix)
        mapping, sending = time.perf_counter() - started, 0.0
        for start in range(0, len(rows), UPSERT_CHUNK):
            began = time.perf_counter()
            chunk = self._with_vectors(
                rows[start : start + UPSERT_CHUNK], unit[start : start + UPSERT_CHUNK]
            )
            mapped = time.perf_counter()
            self._call("upsert", lambda c, chunk=chunk: c.upsert(self.name, chunk))
            mapping, sending = mapping + mapped - began, sending + time.perf_counter() - mapped
        self._ingest_seconds["full_vectors"] += mapping
        self._ingest_seconds["store"] += sending
        return len(rows)

    def delete(self, ids: Sequence[str]) -> int:
        """Delete documents by id (unknown ids are ignored); how many there were."""
        if isinstance(ids, str) or not all(isinstance(i, str) and i for i in ids):
            raise ValueError("ids must be a sequence of non-empty strings")
        present = self.present(ids)
        if present:
            keys = [key_of(doc_id) for doc_id in present]
            self._call("delete", lambda c: c.delete(self.name, ids=keys))
        return len(present)

    # -- reading ---------------------------------------------------------------------------

    def _read(self, doc_ids: Sequence[str], fields: list[str]) -> dict[str, dict]:
        """Stored rows by key, read :data:`READ_CHUNK` keys at a time."""
        found: dict[str, dict] = {}
        keys = list(dict.fromkeys(key_of(doc_id) for doc_id in doc_ids))
        for start in range(0, len(keys), READ_CHUNK):
            chunk = keys[start : start + READ_CHUNK]
            rows = self._call(
                "query",
                lambda c, chunk=chunk: c.query(
                    self.name,
                    filter=_keys_expression(chunk),
                    output_fields=[KEY, *fields],
                    limit=len(chunk),
                    consistency_level="Strong",
                ),
            )
            found.update((row[KEY], row) for row in rows)
        return found

    def contents_of(self, doc_ids: Sequence[str]) -> list[Contents | None]:
        rows = self._read(doc_ids, ["text", "metadata"])
        contents: list[Contents | None] = []
        for doc_id in doc_ids:
            row = rows.get(key_of(doc_id))
            contents.append(
                None if row is None else Contents(doc_id, row["text"], json.loads(row["metadata"]))
            )
        return contents

    def present(self, doc_ids: Sequence[str]) -> set[str]:
        return {id_of(key) for key in self._read(doc_ids, [])}

    def _search_rows(
        self,
        vector: VectorField,
        queries: np.ndarray,
        k: int,
        ef_search: int | None,
        where: Filter | None,
        fields: Sequence[str] = (),
    ) -> list[list[Any]]:
        """One search of ``vector``'s field for ``queries`` (already in its space): per query,
        Milvus's hits, each with its key, its distance and ``fields``."""
        condition = "" if where is None else expression(where, FILTERABLE)
        return self._call(
            "search",
            lambda c: c.search(
                self.name,
                data=queries.tolist(),
                anns_field=vector.name,
                limit=k,
                filter=condition,
                search_params=self.params.search(vector.kind, k, ef_search),
                output_fields=[KEY, *fields],
                consistency_level="Strong",
            ),
        )

    @staticmethod
    def _filtering(where: Filter | None) -> Filtering | None:
        """A filtered search's report: Milvus applies the filter and does not say how many
        documents it matched."""
        return None if where is None else {"mode": "milvus", "matching": None}

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
    ) -> SearchResult:
        """The ``k`` best documents per query from one field (see
        :meth:`index.Collection.search`; a filtered search's ``filtering`` says ``milvus``)."""
        vector = self._field(scoring, dim, kind)
        k = check_count(k, "k")
        queries = as_matrix(query_vectors, sorted({dim, self.dim}), "query_vectors")
        started = time.perf_counter()
        rows = self._search_rows(
            vector, in_space(scoring, dim, queries, self.fragment_dim), k, ef_search, where
        )
        hits = [[Hit(id_of(hit[KEY]), float(hit["distance"])) for hit in row] for row in rows]
        timings: Timings = {"search": time.perf_counter() - started}
        return SearchResult(hits, timings, self._filtering(where))

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
    ) -> SearchResult:
        """Coarse-to-fine: ``k × factor`` from the shortlist prefix's field (filtered there),
        returned with their ``full`` vectors, re-ranked exactly (:func:`index.rerank.rerank`)."""
        vector = self._field("cosine", shortlist_dim, kind)
        k = check_count(k, "k")
        shortlist_k = k * check_count(factor, "factor")
        queries = as_matrix(query_vectors, (self.dim,), "query_vectors")
        prefixes = prefix_unit(queries, shortlist_dim)
        per_search = max(1, C2F_ROWS_PER_SEARCH // shortlist_k)
        started = time.perf_counter()
        shortlists: list[list[Any]] = []
        for start in range(0, len(queries), per_search):
            shortlists += self._search_rows(
                vector,
                prefixes[start : start + per_search],
                shortlist_k,
                ef_search,
                where,
                [FULL],
            )
        shortlisted = time.perf_counter()
        scores, positions = rerank(
            unit_rows(queries),
            (np.array([hit[FULL] for hit in row], dtype=np.float32) for row in shortlists),
            k,
        )
        ranked = [
            [
                Hit(id_of(row[position][KEY]), float(score))
                for score, position in zip(query_scores, query_positions, strict=True)
                if position >= 0
            ]
            for row, query_scores, query_positions in zip(
                shortlists, scores, positions, strict=True
            )
        ]
        timings: Timings = {
            "shortlist": shortlisted - started,
            "rerank": time.perf_counter() - shortlisted,
        }
        return SearchResult(ranked, timings, self._filtering(where))

    def stats(self) -> CollectionStats:
        """Documents (Milvus's row count) and, per vector field, its index type and the bytes of
        its float32 vectors (the index's own size is the server's business)."""
        rows = self._call("get_collection_stats", lambda c: c.get_collection_stats(self.name))
        documents = int(rows["row_count"])
        indexes = {}
        for vector in self._fields():
            index_type, _ = self.params.index(vector.kind, vector.dim)
            indexes[f"{vector.scoring}-{vector.dim}-{vector.kind}"] = IndexStats(
                scoring=vector.scoring,
                dim=vector.dim,
                kind=vector.kind,
                vectors=documents,
                bytes=documents * vector.dim * 4,
                bytes_per_vector=vector.dim * 4,
                details={"milvus_field": vector.name, "milvus_index": index_type},
            )
        return CollectionStats(
            documents=documents,
            dim=self.dim,
            prefix_dims=list(self.prefix_dims),
            fragment_dim=self.fragment_dim,
            change_counter=None,
            indexes=indexes,
            recovery={"backend": "milvus", "uri": self.connection.uri, "collection": self.name},
            full_vectors={"dtype": "float32", "field": FULL, "bytes": documents * self.dim * 4},
            ingest_seconds=dict(self._ingest_seconds),
        )

    def snapshot(self) -> int:
        """Nothing to do: Milvus persists and recovers its own indexes."""
        return 0

    def close(self) -> None:
        """Nothing to release: the collection stays loaded for the other replicas, and the
        connection is the service's (:meth:`MilvusConnection.close`)."""

    def drop(self) -> None:
        """Remove the collection and everything in it from Milvus."""
        self._call("drop_collection", lambda c: c.drop_collection(self.name))


def stored_record(connection: MilvusConnection, name: str) -> dict | None:
    """A Milvus collection's Fractal record (None if it has none); :class:`CollectionMissing`
    if there is no such collection."""
    described = connection.call(
        "describe_collection", lambda client: client.describe_collection(name)
    )
    text = (described.get("properties") or {}).get(PROPERTY)
    try:
        return None if text is None else json.loads(text)
    except ValueError:
        return None


def list_collections(connection: MilvusConnection, prefix: str) -> Iterator[str]:
    """The server's collections whose names start with ``prefix``."""
    names = connection.call("list_collections", lambda client: client.list_collections())
    return (name for name in sorted(names) if name.startswith(prefix))
