"""What a running service holds, and the operations the HTTP routes call.

:func:`service.startup.load_runtime` builds a :class:`Runtime` from the settings and the bundle;
the runtime owns its lifecycle (start, periodic snapshots, stop) and the operations. Routes reach
it through the :data:`RuntimeDep` dependency, which answers 503 while none is loaded.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Annotated, Any

import faiss
import numpy as np
from fastapi import Depends, Request

from bundle import Manifest
from encoding import TokenIds
from encoding.encoder import Encoded, OnnxEncoder
from index import CollectionStats, IndexStats
from index.backend import BackendUnavailable, DocumentRefused, IndexBackend
from service.access import Scope, require
from service.batching import MicroBatcher
from service.cache import EmbeddingCache
from service.collections import CollectionSet, HostedCollection
from service.errors import InvalidRequest, NotFound, NotReady
from service.granularity import GranularityRouter
from service.limits import Limits, Served
from service.metrics import Metrics
from service.search import FirstStage, Searcher, SearchOutcome, SearchPlan
from service.settings import Settings

logger = logging.getLogger("service")


@dataclass(frozen=True)
class StoredDocument:
    id: str
    text: str
    metadata: dict[str, Any]


@dataclass(frozen=True)
class CoarseBeam:
    """The HNSW beam coarse queries walk with, where it comes from (``settings``, ``bundle``
    or ``hnsw_ef_search``), and the bundle's measurement when that is the source."""

    ef_search: int
    source: str
    measured: dict[str, Any] | None


@dataclass(frozen=True)
class C2fKnobs:
    """C2F's efSearch and shortlist factor on the default shortlist prefix's graph, where they
    come from (``settings`` or ``index``), and the tuning record's choice when that is it."""

    ef_search: int
    factor: int
    source: str
    measured: dict[str, Any] | None


@dataclass(frozen=True)
class Resolutions:
    """The dimensions the service embeds at (``prefix_dims``) and searches at."""

    dim: int
    prefix_dims: list[int]
    granularity: dict[str, int]
    shortlist_dim: int
    indexed_dims: list[int]
    fragment_dim: int | None
    first_stage: FirstStage
    coarse_beam: CoarseBeam
    c2f: C2fKnobs


@dataclass(frozen=True)
class AutoRouting:
    """How ``granularity=auto`` decides: ``policy`` is ``router`` (the bundle's router.json),
    ``thresholds`` (the heads' confidences against two thresholds) or ``fine`` (no heads)."""

    heads: bool
    policy: str
    fine_threshold: float
    coarse_threshold: float


@dataclass(frozen=True)
class IndexSize:
    """One index of the collection, as ``/info`` and the index gauges report it."""

    scoring: str
    dimension: int
    kind: str
    vectors: int
    bytes: int
    bytes_per_vector: int
    codebooks: str | None

    @classmethod
    def of(cls, stats: IndexStats) -> IndexSize:
        """From one entry of :attr:`index.CollectionStats.indexes`."""
        return cls(
            scoring=stats.scoring,
            dimension=stats.dim,
            kind=stats.kind,
            vectors=stats.vectors,
            bytes=stats.bytes,
            bytes_per_vector=stats.bytes_per_vector,
            codebooks=stats.codebooks,
        )


@dataclass(frozen=True)
class ServiceInfo:
    """What ``/info`` shows. ``encoder`` and ``limits`` are the live encoder and settings: the
    route's model reads the fields it publishes from them."""

    model: str
    bundle_hash: str
    manifest: dict[str, Any]
    resolutions: Resolutions
    auto_routing: AutoRouting
    documents: int
    indexes: list[IndexSize]
    recovery: dict[str, Any]
    encoder: OnnxEncoder
    search_threads: int
    limits: Settings


class Runtime:
    """The loaded bundle, encoder queue, router and collections (each with its searcher)."""

    def __init__(
        self,
        settings: Settings,
        manifest: Manifest,
        *,
        encoder: OnnxEncoder,
        router: GranularityRouter,
        collections: CollectionSet,
        batcher: MicroBatcher,
        search_executor: ThreadPoolExecutor,
        cache: EmbeddingCache | None,
        metrics: Metrics,
    ) -> None:
        self.settings = settings
        self.manifest = manifest
        self.encoder = encoder
        self.router = router
        self.collections = collections
        self.batcher = batcher
        self._search_executor = search_executor
        self.cache = cache
        self.metrics = metrics
        self._snapshot_task: asyncio.Task | None = None
        self._stopping = False
        self._draining = False

    @property
    def collection(self) -> IndexBackend:
        """The default collection's index collection."""
        return self.collections.default.collection

    @property
    def searcher(self) -> Searcher:
        """The default collection's searcher (every collection's plans check the same limits)."""
        return self.collections.default.searcher

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self.batcher.running and not self._stopping

    @property
    def draining(self) -> bool:
        """Whether a SIGTERM was received: requests arriving now are refused
        (:class:`service.shutdown.DrainGate`); those already in go on."""
        return self._draining

    def drain(self) -> None:
        self._draining = True

    def start(self) -> None:
        """Start the encoder queue, the cache client and the periodic snapshots (on the running
        event loop)."""
        self.batcher.start()
        faiss.omp_set_num_threads(self.settings.faiss_threads)  # for searches run inline
        if self.cache is not None:
            self.cache.connect()
        if self.settings.snapshot_interval_s > 0:
            self._snapshot_task = asyncio.get_running_loop().create_task(self._snapshot_loop())
        self.refresh_gauges_if_reachable()

    async def stop(self) -> None:
        """Stop taking work, snapshot the indexes if they changed, close the store."""
        self._stopping = True
        if self._snapshot_task is not None:
            self._snapshot_task.cancel()
            try:
                await self._snapshot_task
            except asyncio.CancelledError:
                pass
        await self.batcher.stop()
        await asyncio.to_thread(self._search_executor.shutdown, wait=True)
        if self.cache is not None:
            await self.cache.close()
        await asyncio.to_thread(self.collections.close)

    async def _snapshot_loop(self) -> None:
        """Snapshot every collection that changed, so the next start need not rebuild or catch
        up much."""
        while True:
            await asyncio.sleep(self.settings.snapshot_interval_s)
            for hosted in await asyncio.to_thread(self.collections.all):
                seconds = await asyncio.to_thread(hosted.snapshot_if_changed)
                if seconds is not None:
                    self.metrics.snapshot_seconds.observe(seconds)

    # -- operations ------------------------------------------------------------------------

    async def collection_named(self, name: str | None, needed: Scope = "read") -> HostedCollection:
        """The collection called ``name`` (None: the default one; 404 if none), for an operation
        that needs the scope ``needed``: 403 first when the request's key does not allow it
        (:func:`service.access.require`), whether the collection exists or not. With a shared
        catalog an unknown name is looked up in the backend, off the event loop."""
        require(needed, name)
        if name is None or not self.collections.shared:
            return self.collections.get(name)
        return await asyncio.to_thread(self.collections.get, name)

    async def embed(self, texts: Sequence[str]) -> Encoded:
        """Full embeddings of ``texts`` (checked by the request models' rules), from the
        cache or through the queue. The request waits on the cache's lookup alone (at most its
        timeout); what it encoded is stored in the background."""
        if self.cache is None:
            return await self.batcher.embed(texts)
        started = time.monotonic()
        cached = await self.cache.get_many(texts)
        self.metrics.cache_wait_seconds.observe(time.monotonic() - started)
        missing = [position for position, entry in enumerate(cached) if entry is None]
        if not missing:
            self.metrics.encoder_calls_skipped.inc()
        else:
            missing_texts = [texts[position] for position in missing]
            encoded = await self.batcher.embed(missing_texts)
            self.cache.put_many(missing_texts, encoded.vectors, encoded.tokens)
            for row, position in enumerate(missing):
                cached[position] = (encoded.vectors[row], int(encoded.tokens[row]))
        entries = [entry for entry in cached if entry is not None]
        return Encoded(
            np.stack([vector for vector, _ in entries]),
            np.array([tokens for _, tokens in entries], dtype=np.int64),
        )

    async def embed_token_ids(self, token_ids: Sequence[TokenIds]) -> Encoded:
        """Full embeddings of texts given as token ids (checked against the vocabulary and
        the max tokens by :class:`service.limits.OpenAIInputRule`), through the queue; the
        cache, keyed by text, is not used."""
        return await self.batcher.embed(token_ids)

    async def add_documents(
        self,
        texts: Sequence[str],
        ids: Sequence[str | None],
        metadata: Sequence[dict[str, Any]],
        param: str = "documents",
        collection: str | None = None,
    ) -> list[str]:
        """Embed and store documents (ids generated where missing) in ``collection`` (None:
        the default one); committed on return. The texts and ids are checked by the request
        models' rules."""
        with (await self.collection_named(collection, "write")).use() as hosted:
            doc_ids = self._checked_documents(ids, param)
            encoded = await self.batcher.embed(texts, bulk=True)  # queries go first
            await self._store(hosted, doc_ids, texts, encoded.vectors, metadata)
        return doc_ids

    async def add_vectors(
        self,
        texts: Sequence[str],
        ids: Sequence[str | None],
        metadata: Sequence[dict[str, Any]],
        vectors: Sequence[Sequence[float]],
        param: str = "documents",
        collection: str | None = None,
    ) -> list[str]:
        """Store documents with precomputed full vectors of the served bundle (their hash, size
        and values checked by the request models' rules), without encoding, in ``collection``;
        all or nothing, committed on return."""
        doc_ids = self._checked_documents(ids, param)
        with (await self.collection_named(collection, "write")).use() as hosted:
            await self._store(hosted, doc_ids, texts, np.array(vectors, dtype=np.float32), metadata)
        return doc_ids

    @staticmethod
    def _checked_documents(ids: Sequence[str | None], param: str) -> list[str]:
        """The ids of documents to add, generated where missing; none may repeat another of
        the request (a rule between items, which JSON Schema cannot state)."""
        doc_ids = [uuid.uuid4().hex if doc_id is None else doc_id for doc_id in ids]
        seen: set[str] = set()
        for position, doc_id in enumerate(doc_ids):
            if doc_id in seen:
                raise InvalidRequest(
                    f"{param}.{position}.id {doc_id!r} repeats an earlier id of this request",
                    f"{param}.{position}.id",
                )
            seen.add(doc_id)
        return doc_ids

    async def _store(
        self,
        hosted: HostedCollection,
        doc_ids: list[str],
        texts: Sequence[str],
        vectors: np.ndarray,
        metadata: Sequence[dict[str, Any]],
    ) -> None:
        """Upsert in one store transaction (off the event loop); a document the backend cannot
        hold (:class:`index.backend.DocumentRefused`) is a 422 naming it, and nothing is
        written."""
        try:
            await asyncio.to_thread(
                hosted.collection.upsert, doc_ids, list(texts), vectors, list(metadata)
            )
        except DocumentRefused as refused:
            raise InvalidRequest(
                f"document {refused.position} ({doc_ids[refused.position]!r}): {refused}",
                f"documents.{refused.position}.{refused.part}",
            ) from None
        hosted.mark_written()

    async def get_document(self, doc_id: str, collection: str | None = None) -> StoredDocument:
        with (await self.collection_named(collection)).use() as hosted:
            (document,) = await asyncio.to_thread(hosted.collection.contents_of, [doc_id])
        if document is None:
            raise NotFound(f"no document with id {doc_id!r}", "id")
        return StoredDocument(document.id, document.text, document.metadata)

    async def delete_document(self, doc_id: str, collection: str | None = None) -> None:
        with (await self.collection_named(collection, "write")).use() as hosted:
            if not await asyncio.to_thread(hosted.collection.delete, [doc_id]):
                raise NotFound(f"no document with id {doc_id!r}", "id")
            hosted.mark_written()

    async def create_collection(
        self, name: str, index_kinds: tuple[str, ...] | None
    ) -> HostedCollection:
        """Create and open a named collection (off the event loop: it opens a store)."""
        require("admin", name)
        hosted = await asyncio.to_thread(self.collections.create, name, index_kinds)
        await asyncio.to_thread(self.refresh_gauges_if_reachable)
        return hosted

    async def delete_collection(self, name: str) -> None:
        """Delete a named collection once the requests using it are done."""
        require("admin", name)
        await asyncio.to_thread(self.collections.delete, name)
        metrics = self.metrics
        for gauge in (
            metrics.documents,
            metrics.index_bytes,
            metrics.index_bytes_per_vector,
            metrics.index_vectors,
        ):
            gauge.clear()  # the deleted collection's series go; the others' come back below
        await asyncio.to_thread(self.refresh_gauges_if_reachable)

    async def find_documents(
        self, doc_ids: Sequence[str], collection: str | None = None
    ) -> list[str]:
        """Which of ``doc_ids`` (checked by the request model's rules) are stored in
        ``collection``, in the order given, each once."""
        with (await self.collection_named(collection)).use() as hosted:
            present = await asyncio.to_thread(hosted.collection.present, doc_ids)
        return [doc_id for doc_id in dict.fromkeys(doc_ids) if doc_id in present]

    async def search(
        self, queries: Sequence[str], plan: SearchPlan, collection: str | None = None
    ) -> tuple[SearchOutcome, float]:
        """Search every query in ``collection`` (None: the default one); also the seconds spent
        encoding them (queue wait included)."""
        loop = asyncio.get_running_loop()
        with (await self.collection_named(collection)).use() as hosted:
            started = loop.time()
            encoded = await self.embed(queries)
            encode_seconds = loop.time() - started
            if self._inline(hosted, len(queries), plan):
                outcome = hosted.searcher.run(encoded.vectors, plan)
            else:
                outcome = await loop.run_in_executor(
                    self._search_executor, hosted.searcher.run, encoded.vectors, plan
                )
        return outcome, encode_seconds

    def _inline(self, hosted: HostedCollection, queries: int, plan: SearchPlan) -> bool:
        """Whether a search runs on the event loop (FRACTAL_INLINE_SEARCH_MAX_K): one query,
        no filter, a small k, and a collection that searches at once (in this process, no
        write holding or awaiting its lock)."""
        return (
            queries == 1
            and plan.where is None
            and plan.k <= self.settings.inline_search_max_k
            and hosted.collection.searches_now
        )

    # -- introspection ---------------------------------------------------------------------

    @property
    def limits(self) -> Limits:
        """What requests may hold: the settings' limits and what this runtime serves."""
        manifest = self.manifest
        scorings = ("cosine", "sfs") if self.collection.fragment_dim is not None else ("cosine",)
        served = Served(
            model=manifest.name,
            bundle_hash=manifest.content_hash,
            dim=manifest.dim,
            prefix_dims=tuple(manifest.prefix_dims),
            index_kinds=self.searcher.index_kinds,
            indexed_dims=tuple(self.searcher.dimensions),
            scorings=scorings,
            vocabulary_size=self.encoder.vocabulary_size,
            max_tokens=self.encoder.max_tokens,
        )
        return Limits.of(self.settings, served)

    def refresh_gauges_if_reachable(self) -> None:
        """:meth:`refresh_gauges`, keeping the last values while the backend cannot be reached
        (a scrape during an outage still shows the error counts)."""
        try:
            self.refresh_gauges()
        except BackendUnavailable:
            logger.debug("gauges not refreshed: the index backend is unavailable")

    def refresh_gauges(self) -> CollectionStats:
        """Update every collection's document and index gauges; return the default one's
        stats (:class:`BackendUnavailable` when the backend cannot tell)."""
        for hosted in self.collections.all():
            stats = hosted.stats()
            self.metrics.documents.labels(collection=hosted.name).set(stats.documents)
            for index in map(IndexSize.of, stats.indexes.values()):
                labels = {
                    "collection": hosted.name,
                    "scoring": index.scoring,
                    "dimension": str(index.dimension),
                    "kind": index.kind,
                }
                self.metrics.index_bytes.labels(**labels).set(index.bytes)
                self.metrics.index_bytes_per_vector.labels(**labels).set(index.bytes_per_vector)
                self.metrics.index_vectors.labels(**labels).set(index.vectors)
        return self.collections.default.stats()

    def _c2f_knobs(self) -> C2fKnobs:
        walk = self.searcher.c2f_walk
        common = self.settings.hnsw_ef_search
        ef_search = common if walk.ef_search is None else walk.ef_search
        return C2fKnobs(ef_search, walk.factor, walk.source, walk.measured)

    def info(self) -> ServiceInfo:
        stats = self.refresh_gauges()
        manifest = self.manifest
        return ServiceInfo(
            model=manifest.name,
            bundle_hash=manifest.content_hash,
            manifest=manifest.to_json(),
            resolutions=Resolutions(
                dim=manifest.dim,
                prefix_dims=list(manifest.prefix_dims),
                granularity=dict(manifest.granularity),
                shortlist_dim=self.searcher.shortlist_dim,
                indexed_dims=self.searcher.dimensions,
                fragment_dim=self.collection.fragment_dim,
                first_stage=self.searcher.first_stage,
                coarse_beam=CoarseBeam(*self.searcher.coarse_beam),
                c2f=self._c2f_knobs(),
            ),
            auto_routing=AutoRouting(
                heads=self.router.has_heads,
                policy=self.router.policy,
                fine_threshold=self.router.fine_threshold,
                coarse_threshold=self.router.coarse_threshold,
            ),
            documents=stats.documents,
            indexes=[IndexSize.of(index) for index in stats.indexes.values()],
            recovery=stats.recovery.as_dict(),
            encoder=self.encoder,
            search_threads=self._search_executor.submit(faiss.omp_get_max_threads).result(),
            limits=self.settings,
        )


async def current_runtime(request: Request) -> Runtime:
    """The app's runtime, or 503 while it is not loaded or is shutting down. (A coroutine:
    FastAPI runs a plain function dependency in a worker thread, a thread hop per request.)"""
    runtime: Runtime | None = request.app.state.runtime
    if runtime is None or not runtime.ready:
        raise NotReady("the service is not ready: the bundle and index are not loaded")
    return runtime


RuntimeDep = Annotated[Runtime, Depends(current_runtime)]
