"""Redis killed with ``kill -9`` in the middle of a bounded concurrent load on a real service
process: no request fails, and once Redis is back on its port the cache is used again without
restarting the service."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from benchmarks.harness.metrics import metric, metric_samples
from benchmarks.harness.processes import RedisServer, ServiceProcess, wait_until

QUERIES = [f"what is the balance of account number {number}" for number in range(40)]
REQUESTS = 400
WORKERS = 16
KILL_AFTER = REQUESTS // 3
LOOKUPS = "fractal_cache_lookups_total"


def _request(client: httpx.Client, number: int) -> int:
    """One request of the load: /embed and /search in turn, over the query set."""
    query = QUERIES[number % len(QUERIES)]
    try:
        if number % 2:
            return client.get("/search", params={"q": query, "k": 3}).status_code
        return client.post("/embed", json={"texts": [query], "dims": 64}).status_code
    except httpx.TransportError as exc:
        return -len(type(exc).__name__)  # never 200: counted as a failure


def test_redis_killed_mid_load_fails_no_request_and_the_cache_comes_back(
    launch: Callable[..., ServiceProcess],
    identity_bundle_dir: Path,
    tmp_path: Path,
    redis_server: RedisServer,
) -> None:
    server = launch(
        identity_bundle_dir, tmp_path / "index", redis_url=redis_server.url, redis_retry_s="0.2"
    )
    completed = 0
    lock = threading.Lock()
    killed_at: list[int] = []

    def one(number: int) -> int:
        nonlocal completed
        status = _request(client, number)
        with lock:
            completed += 1
            if completed == KILL_AFTER:
                redis_server.kill()
                killed_at.append(completed)
        return status

    with server.client() as client:
        assert client.post("/documents", json={"documents": [{"text": QUERIES[0]}]}).is_success
        with ThreadPoolExecutor(WORKERS) as pool:
            statuses = list(pool.map(one, range(REQUESTS)))
        failed = [status for status in statuses if status != 200]
        assert killed_at == [KILL_AFTER]
        assert failed == [], f"{len(failed)} of {REQUESTS} requests failed: {set(failed)}"
        during = metric_samples(client)
        assert metric(during, LOOKUPS, result="hit") > 0  # the cache served before the kill
        assert metric(during, "fractal_cache_errors_total", operation="get") > 0

        redis_server.start()  # same port, empty

        def hits_resume() -> bool:
            before = metric(metric_samples(client), LOOKUPS, result="hit")
            for number in range(4):
                assert _request(client, number) == 200
            return metric(metric_samples(client), LOOKUPS, result="hit") > before

        wait_until(hits_resume, "cache hits after Redis came back", timeout_s=30)
        assert redis_server.client().dbsize() > 0
