"""``/health``, ``/ready``, ``/info`` and ``/metrics``."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from fastapi import Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, Field

from service.errors import NotReady, error_responses
from service.routes import FromAttributes, new_router, public_when
from service.runtime import RuntimeDep

router = new_router(tags=["system"])


class Status(BaseModel):
    status: Literal["ok", "ready"]


class IndexInfo(FromAttributes):
    scoring: Literal["cosine", "sfs"]
    dimension: int
    kind: Literal["exact", "hnsw", "pq"]
    vectors: int
    bytes: int = Field(description="Serialised size of the FAISS index.")
    bytes_per_vector: int = Field(
        description="Bytes one vector's code takes: 4 × dimension for float32, m for PQ."
    )
    codebooks: Literal["bundle", "trained"] | None = Field(
        None, description="PQ only: centroids shipped in the bundle (MSHC) or trained here."
    )


class FirstStage(FromAttributes):
    source: Literal["index", "bundle", "settings"] = Field(
        description="index: the choice measured on this collection's own documents by fractal "
        "tune --first-stages (FRACTAL_FIRST_STAGE=index); bundle: the export's measured choice "
        "(FRACTAL_FIRST_STAGE=bundle, or index where the collection has no record); either for "
        "what the environment does not set; settings: FRACTAL_HNSW_STORAGE, FRACTAL_HNSW_M and "
        "the bundle's shortlist prefix."
    )
    shortlist_dim: int = Field(description="The prefix C2F's graph walk shortlists at.")
    hnsw_storage: str = Field(
        description="How the graphs store vectors: flat, sq8, sq8u, sq4 or tq4."
    )
    hnsw_m: int = Field(description="The graphs' degree M.")
    walk: str = Field(
        description="How C2F walks the graph and re-ranks: native avx512, native avx2 or native "
        "portable (Fractal's own C walk, on the kernels this CPU runs; sq8 and sq8u graphs), "
        "or faiss (FAISS's walk and refine: other codes, the extension not built, or "
        "FRACTAL_HNSW_NATIVE_WALK=false)."
    )
    measured: dict[str, Any] | None = Field(
        description="The measured choice in use at FRACTAL_FIRST_STAGE_RECALL (prefix, codes, "
        "degree, efSearch, shortlist factor, recall, p50 and p99 µs, resident bytes per "
        "document; on the export's corpus with source bundle, on the collection's documents "
        "with source index, with the documents it measured on); null with source settings."
    )
    index_choice: dict[str, Any] | None = Field(
        description="The fastest first stage at FRACTAL_FIRST_STAGE_RECALL measured on this "
        "collection's own documents by fractal tune --first-stages (the same fields, and the "
        "documents it measured on), when that record exists; null otherwise. Served with "
        "FRACTAL_FIRST_STAGE=index (the graph rebuilt when the collection opens)."
    )


class CoarseBeam(FromAttributes):
    ef_search: int = Field(description="The HNSW beam width coarse queries walk with.")
    source: Literal["settings", "bundle", "hnsw_ef_search"] = Field(
        description="settings: FRACTAL_COARSE_EF_SEARCH; bundle: the export's measured beam for "
        "the graphs' storage (FRACTAL_FIRST_STAGE=bundle); hnsw_ef_search: the common beam."
    )
    measured: dict[str, Any] | None = Field(
        description="With source bundle: the measured choice (storage, efSearch, same-domain "
        "precision@10, p50 and p99 µs, on the export's corpus); else null."
    )


class C2fKnobs(FromAttributes):
    ef_search: int = Field(description="The HNSW beam width of C2F's walk at the shortlist prefix.")
    factor: int = Field(description="C2F's shortlist size is k × factor.")
    source: Literal["settings", "index"] = Field(
        description="settings: FRACTAL_HNSW_EF_SEARCH and FRACTAL_C2F_FACTOR; index: `fractal "
        "tune`'s record for the served graph (FRACTAL_C2F_TUNING=index), for what the "
        "environment does not set."
    )
    measured: dict[str, Any] | None = Field(
        description="With source index: the recorded choice (efSearch, factor, recall, p50 and "
        "p99 µs, and the documents the collection held when measured); else null."
    )


class Resolutions(FromAttributes):
    dim: int
    prefix_dims: list[int] = Field(description="Dimensions /embed and /v1/embeddings serve.")
    granularity: dict[str, int] = Field(
        description="coarse and fine dimensions, and the C2F shortlist's when the bundle "
        "records one."
    )
    shortlist_dim: int = Field(
        description="The prefix rerank=c2f shortlists at by default: the measured first "
        "stage's (see first_stage), else the bundle's measured shortlist prefix (its coarse one "
        "for bundles without the measurement)."
    )
    indexed_dims: list[int] = Field(description="Dimensions /search has indexes for.")
    fragment_dim: int | None = Field(description="SFS fragment size; null: SFS is off.")
    first_stage: FirstStage = Field(description="C2F's first stage in use.")
    coarse_beam: CoarseBeam = Field(description="The coarse route's graph walk.")
    c2f: C2fKnobs = Field(description="C2F's walk and shortlist on the default collection.")


class AutoRouting(FromAttributes):
    heads: bool = Field(description="Whether the bundle has heads; without, auto → fine.")
    policy: Literal["router", "thresholds", "fine"] = Field(
        description="router: the bundle's router.json decides; thresholds: the heads' "
        "confidences against the two thresholds; fine: no heads, always fine."
    )
    fine_threshold: float
    coarse_threshold: float


class EncoderInfo(FromAttributes):
    providers: list[str]
    threads: int
    spin: bool = Field(description="Whether idle ONNX Runtime threads spin-wait.")
    nice: int = Field(
        description="Nice values the encoder's threads run below the service's "
        "(FRACTAL_ENCODER_NICE; 0 where threads have no nice value of their own)."
    )
    shape_buckets: bool = Field(
        description="Whether encoder calls are padded to a few shapes (OpenVINO with "
        "FRACTAL_ENCODER_SHAPE_BUCKETS; never on ONNX Runtime)."
    )


class Limits(FromAttributes):
    max_texts: int
    max_chars: int
    default_k: int
    max_k: int
    c2f_factor: int
    max_batch_size: int
    batch_policy: Literal["length", "fifo"] = Field(
        description="How the encoder queue makes a batch (FRACTAL_BATCH_POLICY)."
    )
    batch_tokens: int = Field(description="Padded tokens per encoder batch at most.")
    batch_window: int = Field(description="Queued texts the length policy picks a batch from.")
    max_wait_ms: float
    queue_depth: int


class Info(FromAttributes):
    model: str
    bundle_hash: str
    manifest: dict[str, Any]
    resolutions: Resolutions
    auto_routing: AutoRouting
    documents: int
    indexes: list[IndexInfo]
    recovery: dict[str, Any] = Field(description="How the indexes were opened at start-up.")
    encoder: EncoderInfo
    search_threads: int = Field(description="FAISS OpenMP threads, read in a search thread.")
    limits: Limits


@router.get("/health")
@public_when("public_health")
async def health() -> Status:
    """The process is alive (says nothing about the bundle or index)."""
    return Status(status="ok")


@router.get("/ready", responses=error_responses(503))
@public_when("public_health")
async def ready(runtime: RuntimeDep) -> Status:
    """The bundle and the index are loaded, the encoder queue runs, and the index backend
    answers (Milvus: checked at most once a second)."""
    problem = await asyncio.to_thread(runtime.collections.problem)
    if problem is not None:
        raise NotReady(f"the index backend cannot serve: {problem}")
    return Status(status="ready")


@router.get("/info", responses=error_responses(503))
async def info(runtime: RuntimeDep) -> Info:
    """The manifest, the served resolutions, the documents and every index's size."""
    return Info.model_validate(await asyncio.to_thread(runtime.info))


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text"}},
)
@public_when("public_metrics")
async def metrics(request: Request) -> Response:
    """Prometheus metrics (text exposition format)."""
    runtime = request.app.state.runtime
    if runtime is not None and runtime.ready:
        await asyncio.to_thread(runtime.refresh_gauges_if_reachable)
    body = generate_latest(request.app.state.metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
