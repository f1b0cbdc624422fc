"""What a running service holds, and the operations the HTTP routes call.

:meth:`Runtime.load` checks and loads everything before the first request (bundle manifest and
file hashes, tokenizer, ONNX sessions, the collection and its indexes), so a bad configuration
ends start-up with one :class:`service.errors.StartupError` line. Routes reach the runtime
through the :data:`RuntimeDep` dependency, which answers 503 while none is loaded.

The index directory records which bundle its vectors came from (``bundle.json``); serving it
with another bundle is refused, because stored vectors from one model are meaningless to
queries from another.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import faiss
import numpy as np
from fastapi import Depends, Request

from bundle import BundleError, Manifest, load_bundle
from index import Collection, Document
from service.batching import MicroBatcher
from service.cache import EmbeddingCache
from service.encoder import Encoded, OnnxEncoder
from service.errors import InvalidRequest, NotFound, NotReady, StartupError
from service.limits import check_document_id, check_texts
from service.metrics import Metrics
from service.routing import GranularityRouter
from service.search import Searcher, SearchOutcome, SearchPlan
from service.settings import Settings, available_cores

logger = logging.getLogger("service")

BUNDLE_RECORD = "bundle.json"


def _check_bundle_record(index_dir: Path, manifest: Manifest) -> None:
    """Write ``bundle.json`` in a new index dir; refuse one made with another bundle."""
    record_path = index_dir / BUNDLE_RECORD
    expected = {"name": manifest.name, "bundle_hash": manifest.content_hash, "dim": manifest.dim}
    if record_path.is_file():
        try:
            record = json.loads(record_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise StartupError(f"{record_path} is unreadable: {exc}") from exc
        if record != expected:
            raise StartupError(
                f"index dir {index_dir} holds vectors of bundle {record.get('name')!r} "
                f"({str(record.get('bundle_hash'))[:12]}), not of the served bundle "
                f"{manifest.name!r} ({manifest.content_hash[:12]}); use another "
                "FRACTAL_INDEX_DIR or re-ingest"
            )
        return
    if (index_dir / "store.sqlite3").exists():
        raise StartupError(
            f"index dir {index_dir} has a store but no {BUNDLE_RECORD}: cannot tell which "
            "bundle made its vectors"
        )
    record_path.write_text(json.dumps(expected, indent=2) + "\n", encoding="utf-8")


def bundle_pq_codebooks(settings: Settings, manifest: Manifest) -> dict[int, np.ndarray]:
    """The bundle's PQ centroids by prefix dimension (MSHC), when the service builds PQ indexes.

    The bundle's sha256 check has already vouched for the file; its shape must match the manifest.
    """
    spec = manifest.compression.pq if manifest.compression is not None else None
    if spec is None or "pq" not in settings.index_kinds:
        return {}
    path = settings.bundle_dir / spec.file
    try:
        codebooks = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise StartupError(f"cannot read the bundle's PQ codebooks {path}: {exc}") from exc
    if codebooks.shape != spec.shape or codebooks.dtype != np.float32:
        raise StartupError(
            f"{path} holds {codebooks.dtype} {list(codebooks.shape)}, the manifest says "
            f"float32 {list(spec.shape)}"
        )
    return {spec.dim: codebooks}


def open_collection(settings: Settings, manifest: Manifest) -> Collection:
    """The collection in ``settings.index_dir``, indexed at the coarse and fine prefixes; a PQ
    index at a dimension the bundle ships PQ codebooks for uses them (MSHC)."""
    fragment_dim = manifest.fragment_dim
    if fragment_dim is None and settings.sfs:
        fragment_dim = settings.sfs_fragment_dim
    try:
        settings.index_dir.mkdir(parents=True, exist_ok=True)
        _check_bundle_record(settings.index_dir, manifest)
        return Collection(
            settings.index_dir,
            dim=manifest.dim,
            prefix_dims=sorted({manifest.coarse_dim, manifest.fine_dim}),
            index_kinds=settings.index_kinds,
            hnsw=settings.hnsw,
            pq=settings.pq,
            fragment_dim=fragment_dim,
            pq_codebooks=bundle_pq_codebooks(settings, manifest),
        )
    except (OSError, ValueError) as exc:
        raise StartupError(f"cannot open the index in {settings.index_dir}: {exc}") from exc


@dataclass(frozen=True)
class StoredDocument:
    id: str
    text: str
    metadata: dict[str, Any]


class Runtime:
    """The loaded bundle, encoder queue, router, collection and searcher."""

    def __init__(
        self,
        settings: Settings,
        manifest: Manifest,
        encoder: OnnxEncoder,
        router: GranularityRouter,
        collection: Collection,
        metrics: Metrics,
    ) -> None:
        self.settings = settings
        self.manifest = manifest
        self.encoder = encoder
        self.router = router
        self.collection = collection
        self.metrics = metrics
        self.batcher = MicroBatcher(
            encoder.encode,
            metrics,
            max_batch=settings.max_batch_size,
            max_wait_s=settings.max_wait_ms / 1000,
            max_depth=settings.queue_depth,
        )
        self.searcher = Searcher(collection, manifest, router, settings, metrics)
        # OpenMP thread counts belong to each thread, so FAISS's is set in every search thread.
        self._search_executor = ThreadPoolExecutor(
            max_workers=min(32, available_cores() + 4),
            thread_name_prefix="search",
            initializer=faiss.omp_set_num_threads,
            initargs=(settings.faiss_threads,),
        )
        self.cache = (
            None
            if settings.redis_url is None
            else EmbeddingCache(
                settings.redis_url.get_secret_value(),
                manifest.content_hash,
                manifest.dim,
                ttl_s=settings.cache_ttl_s,
                timeout_s=settings.redis_timeout_ms / 1000,
                retry_s=settings.redis_retry_s,
                metrics=metrics,
            )
        )
        self._unsnapshotted_writes = False
        self._snapshot_lock = threading.Lock()
        self._snapshot_task: asyncio.Task | None = None
        self._stopping = False

    @classmethod
    def load(cls, settings: Settings, metrics: Metrics | None = None) -> Runtime:
        """Load and check everything; :class:`StartupError` with one line on any problem."""
        try:
            manifest = load_bundle(settings.bundle_dir)
        except BundleError as exc:
            raise StartupError(str(exc)) from exc
        try:
            encoder = OnnxEncoder(
                settings.bundle_dir, manifest, settings.threads, settings.encoder_spin
            )
            router = GranularityRouter(
                settings.bundle_dir,
                manifest,
                settings.auto_fine_threshold,
                settings.auto_coarse_threshold,
            )
        except Exception as exc:  # ONNX Runtime and tokenizers raise their own exception types
            raise StartupError(f"cannot load the bundle's tokenizer or ONNX graphs: {exc}") from exc
        collection = open_collection(settings, manifest)
        return cls(settings, manifest, encoder, router, collection, metrics or Metrics())

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self.batcher.running and not self._stopping

    def start(self) -> None:
        """Start the encoder queue, the cache client and the periodic snapshots (on the running
        event loop)."""
        self.batcher.start()
        if self.cache is not None:
            self.cache.connect()
        if self.settings.snapshot_interval_s > 0:
            self._snapshot_task = asyncio.get_running_loop().create_task(self._snapshot_loop())
        self.refresh_gauges()

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
        await asyncio.to_thread(self._snapshot_if_changed)
        self.collection.close()

    async def _snapshot_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.snapshot_interval_s)
            await asyncio.to_thread(self._snapshot_if_changed)

    def _snapshot_if_changed(self) -> None:
        """Write an index snapshot, so the next start need not rebuild or catch up much.

        Serialised by a lock, so the snapshot at shutdown waits for a periodic one whose task
        was cancelled while its thread still runs, and the store is closed only after both.
        """
        with self._snapshot_lock:
            if not self._unsnapshotted_writes:
                return
            self._unsnapshotted_writes = False
            try:
                counter = self.collection.snapshot()
            except (OSError, RuntimeError):
                self._unsnapshotted_writes = True
                logger.exception("index snapshot failed; the store is intact, a restart rebuilds")
                return
            logger.info("index snapshot written at change %d", counter)

    # -- operations ------------------------------------------------------------------------

    async def embed(
        self, texts: Sequence[str], param: str, item_params: Sequence[str] | None = None
    ) -> Encoded:
        """Full embeddings of ``texts``, from the cache or through the queue, after the input
        checks (see :func:`service.limits.check_texts` for ``param`` and ``item_params``)."""
        check_texts(texts, self.settings.max_texts, self.settings.max_chars, param, item_params)
        if self.cache is None:
            return await self.batcher.embed(texts)
        cached = await self.cache.get_many(texts)
        missing = [position for position, entry in enumerate(cached) if entry is None]
        if not missing:
            self.metrics.encoder_calls_skipped.inc()
        else:
            missing_texts = [texts[position] for position in missing]
            encoded = await self.batcher.embed(missing_texts)
            await self.cache.put_many(missing_texts, encoded.vectors, encoded.tokens)
            for row, position in enumerate(missing):
                cached[position] = (encoded.vectors[row], int(encoded.tokens[row]))
        entries = [entry for entry in cached if entry is not None]
        return Encoded(
            np.stack([vector for vector, _ in entries]),
            np.array([tokens for _, tokens in entries], dtype=np.int64),
        )

    async def add_documents(
        self,
        texts: Sequence[str],
        ids: Sequence[str | None],
        metadata: Sequence[dict[str, Any]],
        param: str = "documents",
    ) -> list[str]:
        """Embed and store documents (ids generated where missing); committed on return."""
        item_params = [f"{param}.{position}.text" for position in range(len(texts))]
        check_texts(texts, self.settings.max_texts, self.settings.max_chars, param, item_params)
        doc_ids = [uuid.uuid4().hex if doc_id is None else doc_id for doc_id in ids]
        seen: set[str] = set()
        for position, doc_id in enumerate(doc_ids):
            check_document_id(doc_id, f"{param}.{position}.id")
            if doc_id in seen:
                raise InvalidRequest(
                    f"{param}.{position}.id {doc_id!r} repeats an earlier id of this request",
                    f"{param}.{position}.id",
                )
            seen.add(doc_id)
        encoded = await self.batcher.embed(texts)
        await asyncio.to_thread(
            self.collection.upsert, doc_ids, list(texts), encoded.vectors, list(metadata)
        )
        self._unsnapshotted_writes = True
        return doc_ids

    async def get_document(self, doc_id: str) -> StoredDocument:
        document: Document | None = await asyncio.to_thread(self.collection.get, doc_id)
        if document is None:
            raise NotFound(f"no document with id {doc_id!r}", "id")
        return StoredDocument(document.id, document.text, document.metadata)

    async def delete_document(self, doc_id: str) -> None:
        if not await asyncio.to_thread(self.collection.delete, [doc_id]):
            raise NotFound(f"no document with id {doc_id!r}", "id")
        self._unsnapshotted_writes = True

    async def search(
        self,
        queries: Sequence[str],
        plan: SearchPlan,
        param: str,
        item_params: Sequence[str] | None = None,
    ) -> tuple[SearchOutcome, float]:
        """Search every query; also the seconds spent encoding them (queue wait included)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        encoded = await self.embed(queries, param, item_params)
        encode_seconds = loop.time() - started
        outcome = await loop.run_in_executor(
            self._search_executor, self.searcher.run, encoded.vectors, plan
        )
        return outcome, encode_seconds

    # -- introspection ---------------------------------------------------------------------

    def refresh_gauges(self) -> dict:
        """Update the document and index gauges from the collection; return its stats."""
        stats = self.collection.stats()
        self.metrics.documents.set(stats["documents"])
        for index in stats["indexes"].values():
            labels = {
                "scoring": index["scoring"],
                "dimension": str(index["dim"]),
                "kind": index["kind"],
            }
            self.metrics.index_bytes.labels(**labels).set(index["bytes"])
            self.metrics.index_bytes_per_vector.labels(**labels).set(index["bytes_per_vector"])
            self.metrics.index_vectors.labels(**labels).set(index["vectors"])
        return stats

    def info(self) -> dict[str, Any]:
        stats = self.refresh_gauges()
        manifest = self.manifest
        return {
            "model": manifest.name,
            "bundle_hash": manifest.content_hash,
            "manifest": manifest.to_json(),
            "resolutions": {
                "dim": manifest.dim,
                "prefix_dims": list(manifest.prefix_dims),
                "granularity": dict(manifest.granularity),
                "indexed_dims": self.searcher.dimensions,
                "fragment_dim": self.collection.fragment_dim,
            },
            "auto_routing": {
                "heads": self.router.has_heads,
                "fine_threshold": self.router.fine_threshold,
                "coarse_threshold": self.router.coarse_threshold,
            },
            "documents": stats["documents"],
            "indexes": [
                {
                    "scoring": index["scoring"],
                    "dimension": index["dim"],
                    "kind": index["kind"],
                    "vectors": index["vectors"],
                    "bytes": index["bytes"],
                    "bytes_per_vector": index["bytes_per_vector"],
                    "codebooks": index.get("codebooks"),
                }
                for index in stats["indexes"].values()
            ],
            "recovery": stats["recovery"],
            "encoder": {
                "providers": self.encoder.providers,
                "threads": self.encoder.threads,
                "spin": self.encoder.spin,
            },
            "search_threads": self._search_executor.submit(faiss.omp_get_max_threads).result(),
            "limits": {
                "max_texts": self.settings.max_texts,
                "max_chars": self.settings.max_chars,
                "default_k": self.settings.default_k,
                "max_k": self.settings.max_k,
                "c2f_factor": self.settings.c2f_factor,
                "max_batch_size": self.settings.max_batch_size,
                "max_wait_ms": self.settings.max_wait_ms,
                "queue_depth": self.settings.queue_depth,
            },
        }


def current_runtime(request: Request) -> Runtime:
    """The app's runtime, or 503 while it is not loaded or is shutting down."""
    runtime: Runtime | None = request.app.state.runtime
    if runtime is None or not runtime.ready:
        raise NotReady("the service is not ready: the bundle and index are not loaded")
    return runtime


RuntimeDep = Annotated[Runtime, Depends(current_runtime)]
