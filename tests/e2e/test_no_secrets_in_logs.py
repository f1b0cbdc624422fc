"""A real service process with API keys and a Redis password, logging at debug level, wrong and
right keys thrown at it, and a Redis that refuses its password: no secret reaches its log."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from support.metrics import metric, metric_samples
from support.processes import RedisServer, ServiceProcess

KEY = "e2e-api-key-0123456789abcdef"
WRONG_KEY = "e2e-api-key-0123456789abcdeX"
REDIS_PASSWORD = "redis-password-not-to-be-logged"


def test_keys_and_the_redis_password_stay_out_of_the_log(
    launch: Callable[..., ServiceProcess],
    identity_bundle_dir: Path,
    tmp_path: Path,
    redis_server: RedisServer,
) -> None:
    redis_server.client().config_set("requirepass", "the-password-redis-wants")
    redis_url = f"redis://:{REDIS_PASSWORD}@127.0.0.1:{redis_server.port}/0"
    server = launch(
        identity_bundle_dir,
        tmp_path / "index",
        api_keys=KEY,
        redis_url=redis_url,
        log_level="debug",
    )
    with server.client() as client:
        wrong = client.post(
            "/embed", json={"texts": ["hello"]}, headers={"Authorization": f"Bearer {WRONG_KEY}"}
        )
        assert wrong.status_code == 401
        right = client.post(
            "/embed", json={"texts": ["hello"]}, headers={"Authorization": f"Bearer {KEY}"}
        )
        assert right.status_code == 200  # Redis refused the password: served uncached
        samples = metric_samples(client)
    assert metric(samples, "fractal_cache_errors_total", operation="get") == 1
    assert server.stop() in (0, -15)
    log = server.log.read_text()
    assert "embedding cache unavailable" in log  # the outage was logged ...
    for secret in (KEY, WRONG_KEY, REDIS_PASSWORD):
        assert secret not in log  # ... and no secret with it
