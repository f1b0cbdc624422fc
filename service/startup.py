"""Start-up: from settings and a bundle to a loaded :class:`service.runtime.Runtime`.

:func:`load_runtime` checks and loads everything before the first request (bundle manifest and
file hashes, tokenizer, ONNX sessions, the collection and its indexes), so a bad configuration
ends start-up with one :class:`service.errors.StartupError` line.

The index directory records which bundle its vectors came from (``bundle.json``); serving it
with another bundle is refused, because stored vectors from one model are meaningless to
queries from another.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import faiss
import numpy as np

from bundle import BundleError, Manifest, load_bundle
from index import Collection
from service.batching import MicroBatcher
from service.cache import EmbeddingCache
from service.encoder import OnnxEncoder
from service.errors import StartupError
from service.granularity import GranularityRouter
from service.metrics import Metrics
from service.runtime import Runtime
from service.search import Searcher
from service.settings import Settings, available_cores

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
    if spec is None or "pq" not in settings.index_kinds + (settings.fine_index_kinds or ()):
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
            layout=settings.index_layout(manifest.coarse_dim, manifest.fine_dim),
            full_dtype=settings.full_vectors_dtype,
        )
    except (OSError, ValueError) as exc:
        raise StartupError(f"cannot open the index in {settings.index_dir}: {exc}") from exc


def _load_graphs(settings: Settings, manifest: Manifest) -> tuple[OnnxEncoder, GranularityRouter]:
    """The encoder (tokenizer + ``encoder.onnx``) and the router (``heads.onnx`` if any)."""
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
    return encoder, router


def _search_executor(settings: Settings) -> ThreadPoolExecutor:
    """The threads searches run in. OpenMP thread counts belong to each thread, so FAISS's is
    set in every one of them."""
    return ThreadPoolExecutor(
        max_workers=min(32, available_cores() + 4),
        thread_name_prefix="search",
        initializer=faiss.omp_set_num_threads,
        initargs=(settings.faiss_threads,),
    )


def _cache(settings: Settings, manifest: Manifest, metrics: Metrics) -> EmbeddingCache | None:
    """The Redis query-embedding cache, when ``FRACTAL_REDIS_URL`` is set."""
    if settings.redis_url is None:
        return None
    return EmbeddingCache(
        settings.redis_url.get_secret_value(),
        manifest.content_hash,
        manifest.dim,
        ttl_s=settings.cache_ttl_s,
        timeout_s=settings.redis_timeout_ms / 1000,
        retry_s=settings.redis_retry_s,
        metrics=metrics,
    )


def load_runtime(settings: Settings, metrics: Metrics | None = None) -> Runtime:
    """Load and check everything; :class:`StartupError` with one line on any problem."""
    try:
        manifest = load_bundle(settings.bundle_dir)
    except BundleError as exc:
        raise StartupError(str(exc)) from exc
    encoder, router = _load_graphs(settings, manifest)
    collection = open_collection(settings, manifest)
    metrics = metrics or Metrics()
    batcher = MicroBatcher(
        encoder.encode,
        metrics,
        max_batch=settings.max_batch_size,
        max_wait_s=settings.max_wait_ms / 1000,
        max_depth=settings.queue_depth,
    )
    return Runtime(
        settings,
        manifest,
        encoder=encoder,
        router=router,
        collection=collection,
        batcher=batcher,
        searcher=Searcher(collection, manifest, router, settings, metrics),
        search_executor=_search_executor(settings),
        cache=_cache(settings, manifest, metrics),
        metrics=metrics,
    )
