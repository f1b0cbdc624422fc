"""Redis hung (``SIGSTOP``: it accepts connections and answers nothing) while a real service
process is under a load three times what its encoder takes at once: no request waits more than
the Redis timeout beyond its normal latency.

The load is closed: ``WORKERS`` threads each send one ``/embed`` of a new text (a cache miss,
then a write) after another, for ``LOAD_S`` seconds, first with Redis answering (the normal
latency), then with Redis hung. ``WORKERS`` is three encoder batches, so one batch is encoded
while two wait in the queue. The service probes the hung Redis every ``RETRY_S`` (the pause
after a failure), shorter than a queue wait, so that a request may meet the hang both before
and after its encoding.

Two measures: the service's own ``fractal_cache_wait_seconds`` (what each request waited on the
cache) must stay under two timeouts, the least a request that met the timeout twice waits (the old
code failed it: a miss that timed out waited again on its write); and the requests' median
latency with Redis hung within the normal median plus the timeout plus ``LATENCY_SLACK_S``.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from benchmarks.harness.metrics import Samples, metric, metric_samples
from benchmarks.harness.processes import RedisServer, ServiceProcess

BATCH = 8
WORKERS = 3 * BATCH
LOAD_S = 4.0
TIMEOUT_S = 0.1
RETRY_S = 0.02
WAIT_BOUND = f"{2 * TIMEOUT_S:g}"
"""A bucket of ``fractal_cache_wait_seconds``: a request that met the timeout twice waited more.
The bound leaves a whole timeout for a late event loop: on a busy service (two shared cores, the
load's 24 threads beside it) a due timeout runs late, and a CI run measured 3 of 534 requests
over 1.5 timeouts."""
LATENCY_SLACK_S = 0.05
"""The medians of two runs of the same load on a shared machine differ by a few tens of ms."""
WAITS = "fractal_cache_wait_seconds"

pytestmark = pytest.mark.alone  # its bounds are wall-clock: no other test may load the cores


def _load(client: httpx.Client, phase: str) -> list[float]:
    """Per-request latencies of ``WORKERS`` threads embedding new texts for ``LOAD_S``;
    every answer must be a 200."""
    numbers = itertools.count()
    deadline = time.monotonic() + LOAD_S

    def worker(_: int) -> list[float]:
        latencies = []
        while time.monotonic() < deadline:
            text = f"{phase} query number {next(numbers)} about a savings account"
            started = time.perf_counter()
            response = client.post("/embed", json={"texts": [text], "dims": 64})
            latencies.append(time.perf_counter() - started)
            assert response.status_code == 200, response.text
        return latencies

    with ThreadPoolExecutor(WORKERS) as pool:
        return [latency for run in pool.map(worker, range(WORKERS)) for latency in run]


def _p99(latencies: list[float]) -> float:
    return statistics.quantiles(latencies, n=100)[98]


def _waits(before: Samples, after: Samples, le: str = "+Inf") -> float:
    """Requests whose cache wait was at most ``le`` seconds between two scrapes."""
    name = f"{WAITS}_bucket"
    return metric(after, name, le=le) - metric(before, name, le=le)


def test_hung_redis_adds_at_most_one_timeout_under_overload(
    launch: Callable[..., ServiceProcess],
    identity_bundle_dir: Path,
    tmp_path: Path,
    redis_server: RedisServer,
) -> None:
    server = launch(
        identity_bundle_dir,
        tmp_path / "index",
        redis_url=redis_server.url,
        redis_timeout_ms=str(TIMEOUT_S * 1000),
        redis_retry_s=str(RETRY_S),
        max_batch_size=str(BATCH),
        # Admission control would shed part of this load (429) by the queue's estimated wait;
        # the test measures what Redis adds to requests that are served, so only the depth cap.
        queue_deadline_ms="0",
    )
    limits = httpx.Limits(max_connections=WORKERS)
    with (
        server.client() as scraper,
        httpx.Client(base_url=server.base_url, limits=limits) as client,
    ):
        _load(client, "warm-up")
        start = metric_samples(scraper)
        normal = _load(client, "normal")
        before = metric_samples(scraper)
        redis_server.pause()
        try:
            hung = _load(client, "hung")
        finally:
            redis_server.resume()
        after = metric_samples(scraper)

    errors = "fractal_cache_errors_total"  # Redis answered every normal request
    assert metric(start, errors, operation="get") == metric(before, errors, operation="get")
    assert metric(after, errors, operation="get") > metric(before, errors, operation="get")
    timed_out = _waits(before, after) - _waits(before, after, le="0.05")
    assert timed_out >= WORKERS, "too few requests met the hang to tell anything"
    longer = _waits(before, after) - _waits(before, after, le=WAIT_BOUND)
    assert longer == 0, f"{longer:g} of {timed_out:g} waited on the cache over {WAIT_BOUND} s"
    # End to end, the typical request: its median latency rises by at most one timeout. (The
    # p99 of 24 client threads in the test process on two shared cores moves by hundreds of ms
    # from run to run; the per-request bound above is the service's own measure.)
    normal_p50, hung_p50 = statistics.median(normal), statistics.median(hung)
    assert hung_p50 <= normal_p50 + TIMEOUT_S + LATENCY_SLACK_S, (
        f"median {hung_p50 * 1000:.0f} ms with Redis hung, {normal_p50 * 1000:.0f} ms normally "
        f"(p99 {_p99(hung) * 1000:.0f} / {_p99(normal) * 1000:.0f} ms)"
    )
