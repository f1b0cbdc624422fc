"""Prometheus metrics: one ``CollectorRegistry`` per app, durations in seconds.

Request latency is observed by :class:`RequestMetricsMiddleware` with the labels the handler put
on the request with :func:`label_request`; the other metrics are observed where the work happens.
"""

from __future__ import annotations

import time

from fastapi import Request
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
CACHE_WAIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.5, 1.0)
"""Finer around the Redis timeout (``FRACTAL_REDIS_TIMEOUT_MS``, 100 ms by default), so that a
wait of one timeout tells from one of two."""
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SNAPSHOT_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
REQUEST_LABELS = ("endpoint", "granularity", "dimension", "index")
CACHE_HIT, CACHE_MISS, CACHE_ERROR = "hit", "miss", "error"
CACHE_GET, CACHE_SET = "get", "set"
SHED_REASONS = ("queue_full", "queue_wait", "concurrency", "deadline", "disconnected")
"""Why a request's work was refused or dropped: ``fractal_requests_shed_total{reason}``."""


class Metrics:
    """Every metric the service exports, registered in its own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.request_seconds = Histogram(
            "fractal_request_duration_seconds",
            "HTTP request latency, by route template and the resolution it was served at.",
            [*REQUEST_LABELS, "status"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.encode_batch_size = Histogram(
            "fractal_encode_batch_size",
            "Texts per encoder call.",
            buckets=BATCH_BUCKETS,
            registry=registry,
        )
        self.encode_seconds = Histogram(
            "fractal_encode_duration_seconds",
            "Time of one encoder call (ONNX; its texts were tokenised when queued), per batch.",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.queue_wait_seconds = Histogram(
            "fractal_queue_wait_seconds",
            "Time a text waited in the encoder queue before its batch started.",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.search_seconds = Histogram(
            "fractal_search_duration_seconds",
            "Index search time per group of queries, by dimension, index kind and re-rank.",
            ["dimension", "index", "rerank"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.queue_depth = Gauge(
            "fractal_queue_depth", "Texts waiting in the encoder queue.", registry=registry
        )
        self.documents = Gauge(
            "fractal_documents",
            "Documents in each collection (default: the unnamed one).",
            ["collection"],
            registry=registry,
        )
        self.index_bytes = Gauge(
            "fractal_index_bytes",
            "Serialised size of each FAISS index, by scoring, dimension and kind.",
            ["collection", "scoring", "dimension", "kind"],
            registry=registry,
        )
        self.index_bytes_per_vector = Gauge(
            "fractal_index_bytes_per_vector",
            "Bytes one vector's code takes in each FAISS index (4·dim float32, m for PQ).",
            ["collection", "scoring", "dimension", "kind"],
            registry=registry,
        )
        self.index_vectors = Gauge(
            "fractal_index_vectors",
            "Live vectors in each FAISS index, by scoring, dimension and kind.",
            ["collection", "scoring", "dimension", "kind"],
            registry=registry,
        )
        self.errors = Counter(
            "fractal_errors",
            "Error answers, by error type.",
            ["kind"],
            registry=registry,
        )
        self.cache_lookups = Counter(
            "fractal_cache_lookups",
            "Texts looked up in the embedding cache: hit, miss, or error (Redis failed or is "
            "being waited out after a failure).",
            ["result"],
            registry=registry,
        )
        self.cache_errors = Counter(
            "fractal_cache_errors",
            "Failed Redis calls of the embedding cache, by operation (get, set).",
            ["operation"],
            registry=registry,
        )
        self.snapshot_seconds = Histogram(
            "fractal_snapshot_duration_seconds",
            "Time to write one collection's periodic index snapshot (FRACTAL_SNAPSHOT_INTERVAL_S).",
            buckets=SNAPSHOT_BUCKETS,
            registry=registry,
        )
        self.cache_wait_seconds = Histogram(
            "fractal_cache_wait_seconds",
            "Time an embedding request waited on the Redis cache (at most the Redis timeout, "
            "FRACTAL_REDIS_TIMEOUT_MS, when Redis is down or hung).",
            buckets=CACHE_WAIT_BUCKETS,
            registry=registry,
        )
        for result in (CACHE_HIT, CACHE_MISS, CACHE_ERROR):  # exported from the start, as 0
            self.cache_lookups.labels(result=result)
        for operation in (CACHE_GET, CACHE_SET):
            self.cache_errors.labels(operation=operation)
        self.backend_errors = Counter(
            "fractal_backend_errors",
            "Failed calls to the index backend's server (Milvus), by operation; each one is a "
            "503 answer or a failed readiness check.",
            ["backend", "operation"],
            registry=registry,
        )
        self.requests_shed = Counter(
            "fractal_requests_shed",
            "Requests refused before any work (429: queue_full, queue_wait, concurrency) or whose "
            "queued texts were dropped unencoded (deadline: 504; disconnected: the client left).",
            ["reason"],
            registry=registry,
        )
        for reason in SHED_REASONS:
            self.requests_shed.labels(reason=reason)
        self.encoder_calls_skipped = Counter(
            "fractal_encoder_calls_skipped",
            "Embedding requests answered wholly from the cache, without queueing any text.",
            registry=registry,
        )


def label_request(
    request: Request, *, granularity: str = "", dimension: str = "", index: str = ""
) -> None:
    """Say what a request was served at, for the request latency histogram."""
    request.state.metric_labels = {
        "granularity": granularity,
        "dimension": dimension,
        "index": index,
    }


class RequestMetricsMiddleware:
    """Observes ``fractal_request_duration_seconds`` for each HTTP request of the app: its route
    template (``unmatched`` when no route matched), the labels of :func:`label_request` and the
    answer's status (500 when the app failed without answering). A pure ASGI middleware: it
    adds no task and no stream to a request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = "500"

        async def send_with_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = str(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_with_status)
        finally:
            route = scope.get("route")
            labels = scope.get("state", {}).get("metric_labels", {})
            metrics: Metrics = scope["app"].state.metrics
            metrics.request_seconds.labels(
                endpoint=getattr(route, "path_format", "unmatched"),
                granularity=labels.get("granularity", ""),
                dimension=labels.get("dimension", ""),
                index=labels.get("index", ""),
                status=status,
            ).observe(time.perf_counter() - started)
