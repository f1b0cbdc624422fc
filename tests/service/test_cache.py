"""The Redis embedding cache, against a real ``redis-server``: hits skip the encoder, and a
Redis that is down, hung or restarted never fails a request."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from benchmarks.harness.metrics import metric, metric_samples
from benchmarks.harness.processes import RedisServer, free_port, wait_until
from service.cache import KEY_PREFIX
from service.settings import Settings, describe_settings_error
from tests.service.helpers import serve

TEXTS = [f"how do i move {amount} dollars to my savings account" for amount in range(10)]
REPEATS = 30
LOOKUPS = "fractal_cache_lookups_total"


def _embed(client: TestClient, texts: list[str], **options: object) -> list[list[float]]:
    response = client.post("/embed", json={"texts": texts, **options})
    assert response.status_code == 200, response.text
    return [item["embeddings"][0]["vector"] for item in response.json()["data"]]


@pytest.fixture
def cached_settings(
    tiny_bundle_dir: Path, settings_for: Callable[..., Settings], redis_server: RedisServer
) -> Settings:
    return settings_for(tiny_bundle_dir, redis_url=redis_server.url, redis_retry_s=0.2)


def test_repeated_queries_hit_the_cache_and_skip_the_encoder(cached_settings: Settings) -> None:
    """Repeats are answered from the cache: the stored vector itself, without the encoder. A
    lookup may still miss its deadline on a loaded machine (the request is then served uncached,
    as designed, and its text encoded again, alone, which may move the vector by ~1e-7): up to
    1% of them may, and each one that did is counted as encoded again."""
    exact = 0
    with serve(cached_settings) as client:
        first = _embed(client, TEXTS)
        before = metric_samples(client)
        assert metric(before, "fractal_encode_batch_size_sum") == len(TEXTS)
        for _ in range(REPEATS):
            for text, vector in zip(TEXTS, first, strict=True):
                (again,) = _embed(client, [text])
                assert np.allclose(again, vector, atol=1e-6)
                exact += again == vector
        after = metric_samples(client)

    def counted(result: str) -> float:
        return metric(after, LOOKUPS, result=result) - metric(before, LOOKUPS, result=result)

    hits, lookups = counted("hit"), counted("hit") + counted("miss") + counted("error")
    assert lookups == REPEATS * len(TEXTS)
    assert hits / lookups >= 0.99
    assert exact >= hits  # a hit answers the stored vector itself
    encoded_again = metric(after, "fractal_encode_batch_size_sum") - len(TEXTS)
    assert encoded_again == lookups - hits  # only the texts not found were encoded again
    assert metric(after, "fractal_encoder_calls_skipped_total") == hits


def test_one_entry_serves_every_prefix_and_search(
    cached_settings: Settings, redis_server: RedisServer
) -> None:
    with serve(cached_settings) as client:
        (full,) = _embed(client, [TEXTS[0]], dims=384)
        (coarse,) = _embed(client, [TEXTS[0]], dims=64)
        assert client.get("/search", params={"q": TEXTS[0]}).status_code == 200
        samples = metric_samples(client)
    prefix = np.asarray(full[:64])  # the full vector is unit-norm; its prefix is not
    assert np.allclose(coarse, prefix / np.linalg.norm(prefix), atol=1e-6)
    assert metric(samples, LOOKUPS, result="hit") == 2
    assert metric(samples, "fractal_encode_batch_size_sum") == 1
    keys = redis_server.client().keys(f"{KEY_PREFIX}:*")
    assert len(keys) == 1
    assert redis_server.client().ttl(keys[0]) > 0


def test_redis_down_at_start_then_up_is_used_without_a_restart(
    tiny_bundle_dir: Path, settings_for: Callable[..., Settings], tmp_path: Path
) -> None:
    redis_dir = tmp_path / "late-redis"
    redis_dir.mkdir()
    late = RedisServer(redis_dir, port=free_port())
    settings = settings_for(tiny_bundle_dir, redis_url=late.url, redis_retry_s=0.2)
    try:
        with serve(settings) as client:
            uncached = _embed(client, TEXTS[:3])  # nothing listens on the port yet
            samples = metric_samples(client)
            assert metric(samples, LOOKUPS, result="error") == 3
            assert metric(samples, "fractal_cache_errors_total", operation="get") == 1
            late.start()
            time.sleep(0.3)  # the pause after the failure
            assert _embed(client, TEXTS[:3]) == uncached  # miss, stored
            assert _embed(client, TEXTS[:3]) == uncached  # hit
            assert metric(metric_samples(client), LOOKUPS, result="hit") == 3
    finally:
        late.kill()


def test_hung_redis_costs_a_timeout_not_a_failure(
    cached_settings: Settings, redis_server: RedisServer
) -> None:
    with serve(cached_settings) as client:
        expected = _embed(client, TEXTS[:2])
        redis_server.pause()
        try:
            for _ in range(5):
                assert _embed(client, TEXTS[:2]) == expected
            samples = metric_samples(client)
            assert metric(samples, "fractal_cache_errors_total", operation="get") >= 1
        finally:
            redis_server.resume()

        def hit_again() -> bool:
            before = metric(metric_samples(client), LOOKUPS, result="hit")
            assert _embed(client, TEXTS[:2]) == expected
            return metric(metric_samples(client), LOOKUPS, result="hit") > before

        wait_until(hit_again, "cache hits after Redis resumed", timeout_s=10)


def test_a_value_of_the_wrong_size_is_a_miss(
    cached_settings: Settings, redis_server: RedisServer
) -> None:
    with serve(cached_settings) as client:
        expected = _embed(client, [TEXTS[0]])
        (key,) = redis_server.client().keys(f"{KEY_PREFIX}:*")
        redis_server.client().set(key, b"not a vector")
        assert _embed(client, [TEXTS[0]]) == expected
        samples = metric_samples(client)
    assert metric(samples, LOOKUPS, result="miss") == 2
    assert metric(samples, "fractal_encode_batch_size_sum") == 2


def test_redis_url_is_checked_without_showing_it(tiny_bundle_dir: Path) -> None:
    assert Settings(bundle_dir=tiny_bundle_dir, redis_url="").redis_url is None
    for bad in ("http://:hunter2-password@cache:6379/0", "redis://:hunter2-password@cache:x/0"):
        with pytest.raises(ValidationError) as error:
            Settings(bundle_dir=tiny_bundle_dir, redis_url=bad)
        message = describe_settings_error(error.value)
        assert message.startswith("invalid settings: FRACTAL_REDIS_URL: ")
        assert "hunter2" not in message
