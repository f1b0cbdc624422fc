"""Start-up: from settings and a bundle to a loaded :class:`service.runtime.Runtime`.

:func:`load_runtime` checks and loads everything before the first request (bundle manifest and
file hashes, tokenizer, ONNX sessions, the collection and its indexes), so a bad configuration
ends start-up with one :class:`service.errors.StartupError` line.

The index directory records which bundle its vectors came from (``bundle.json``); serving it
with another bundle is refused, because stored vectors from one model are meaningless to
queries from another.

A quantised bundle (an int8 twin) started where ONNX Runtime offers CUDA is served, with a
warning that names the fp32 bundle it was made from (:func:`cpu_recipe_on_gpu`). An encoder that
runs on the CPU although ONNX Runtime is a GPU build is served too, with a warning
(:func:`cuda_not_loaded`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import faiss
import onnxruntime as ort

from bundle import BundleError, Manifest, load_bundle
from encoding.cores import available_cores
from encoding.encoder import CUDA, OnnxEncoder
from index.catalog import IndexDirError
from service.batching import MicroBatcher
from service.cache import EmbeddingCache
from service.collections import CollectionSet
from service.errors import StartupError
from service.granularity import GranularityRouter
from service.metrics import Metrics
from service.runtime import Runtime
from service.settings import Settings

logger = logging.getLogger("service")


def cpu_recipe_on_gpu(manifest: Manifest, providers: Sequence[str]) -> str | None:
    """A warning when a quantised bundle's encoder runs where CUDA is offered: dynamic int8 is a
    CPU recipe (its integer operators fall back to the CPU), so there the fp32 bundle it was made
    from is the one to serve. None otherwise."""
    quantization = manifest.quantization
    if quantization is None or CUDA not in providers:
        return None
    return (
        f"bundle {manifest.name!r} has a quantised encoder ({quantization.method}, "
        f"{quantization.weight_type}), a CPU recipe, and ONNX Runtime offers CUDA here: serve "
        f"its fp32 source bundle {quantization.source_bundle!r} (content hash "
        f"{quantization.source_bundle_hash[:12]}) on the GPU instead"
    )


def cuda_not_loaded(available: Sequence[str], session: Sequence[str]) -> str | None:
    """A warning when this ONNX Runtime build offers CUDA (``available``, its providers) but the
    encoder's session did not get it (``session``, the session's providers): the CUDA provider
    failed to load, and the encoder runs on the CPU. None otherwise."""
    if CUDA not in available or CUDA in session:
        return None
    return (
        f"the encoder runs on the CPU: this ONNX Runtime build offers {CUDA}, but the encoder's "
        "session did not get it, most likely because the CUDA provider failed to load (missing "
        "or mismatched CUDA or cuDNN libraries; see the ONNX Runtime log above); check the "
        "providers in GET /info (encoder.providers)"
    )


def _load_graphs(settings: Settings, manifest: Manifest) -> tuple[OnnxEncoder, GranularityRouter]:
    """The encoder (tokenizer + ``encoder.onnx``) and the router (``heads.onnx`` and
    ``router.json`` if any)."""
    try:
        encoder = OnnxEncoder(
            settings.bundle_dir,
            manifest,
            settings.threads,
            settings.encoder_spin,
            settings.encoder_runtime,
            batch_tokens=settings.batch_tokens,
            nice=settings.encoder_nice,
            shape_buckets=settings.encoder_shape_buckets,
        )
        router = GranularityRouter(
            settings.bundle_dir,
            manifest,
            settings.auto_fine_threshold,
            settings.auto_coarse_threshold,
        )
    except Exception as exc:  # ONNX Runtime and tokenizers raise their own exception types
        raise StartupError(
            f"cannot load the bundle's tokenizer, ONNX graphs or router: {exc}"
        ) from exc
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
    if warning := cpu_recipe_on_gpu(manifest, encoder.providers):
        logger.warning(warning)
    if encoder.runtime == "onnxruntime" and (
        warning := cuda_not_loaded(ort.get_available_providers(), encoder.providers)
    ):
        logger.warning(warning)
    metrics = metrics or Metrics()
    try:
        collections = CollectionSet(settings, manifest, router, metrics)
    except IndexDirError as exc:
        raise StartupError(str(exc)) from exc
    batcher = MicroBatcher(
        encoder.encode,
        metrics,
        max_batch=settings.max_batch_size,
        max_wait_s=settings.max_wait_ms / 1000,
        max_depth=settings.queue_depth,
        queue_deadline_s=settings.queue_deadline_ms / 1000,
        timeout_s=settings.request_timeout_ms / 1000,
        tokenize=encoder.token_ids,
        policy=settings.batch_policy,
        batch_tokens=settings.batch_tokens,
        window=settings.batch_window,
        nice=settings.encoder_nice,
    )
    return Runtime(
        settings,
        manifest,
        encoder=encoder,
        router=router,
        collections=collections,
        batcher=batcher,
        search_executor=_search_executor(settings),
        cache=_cache(settings, manifest, metrics),
        metrics=metrics,
    )
