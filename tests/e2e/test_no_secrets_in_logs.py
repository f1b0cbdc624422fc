"""A real service process with API keys, a scoped keys file rotated while it runs and a Redis
password, logging at debug level, wrong and right keys thrown at it, and a Redis that refuses its
password; and one with a Milvus token through a Milvus outage: no secret reaches its log."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.harness.metrics import metric, metric_samples
from benchmarks.harness.processes import RedisServer, ServiceProcess
from service.access import RELOAD_INTERVAL_S
from tests.servers import start_milvus

KEY = "e2e-api-key-0123456789abcdef"
WRONG_KEY = "e2e-api-key-0123456789abcdeX"
SCOPED_KEY = "e2e-scoped-read-key-0123456789"
ROTATED_KEY = "e2e-rotated-read-key-987654321"
REDIS_PASSWORD = "redis-password-not-to-be-logged"


def test_keys_and_the_redis_password_stay_out_of_the_log(
    launch: Callable[..., ServiceProcess],
    identity_bundle_dir: Path,
    tmp_path: Path,
    redis_server: RedisServer,
) -> None:
    redis_server.client().config_set("requirepass", "the-password-redis-wants")
    redis_url = f"redis://:{REDIS_PASSWORD}@127.0.0.1:{redis_server.port}/0"
    key_file = tmp_path / "keys.txt"
    key_file.write_text(f"{SCOPED_KEY} read default\n", encoding="utf-8")
    server = launch(
        identity_bundle_dir,
        tmp_path / "index",
        api_keys=KEY,
        api_keys_file=key_file,
        redis_url=redis_url,
        log_level="debug",
    )
    with server.client() as client:
        scoped = {"Authorization": f"Bearer {SCOPED_KEY}"}
        body = {"documents": [{"text": "not for a read key"}]}
        assert client.post("/documents", json=body, headers=scoped).status_code == 403
        # A rotation whose second line is broken: the last good keys stay, and the log says so.
        key_file.write_text(f"{ROTATED_KEY} read *\n{SCOPED_KEY[:8]} read *\n", encoding="utf-8")
        time.sleep(RELOAD_INTERVAL_S * 1.2)
        assert client.get("/info", headers=scoped).status_code == 200
        key_file.write_text(f"{ROTATED_KEY} read *\n", encoding="utf-8")
        time.sleep(RELOAD_INTERVAL_S * 1.2)
        rotated = {"Authorization": f"Bearer {ROTATED_KEY}"}
        assert client.get("/info", headers=rotated).status_code == 200
        assert client.get("/info", headers=scoped).status_code == 401
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
    assert "API keys file not reloaded" in log and "API keys file reloaded" in log
    for secret in (KEY, WRONG_KEY, REDIS_PASSWORD, SCOPED_KEY, SCOPED_KEY[:8], ROTATED_KEY):
        assert secret not in log  # ... and no secret with it


MILVUS_TOKEN = "milvus-user:milvus-password-not-to-be-logged"


def test_the_milvus_token_stays_out_of_the_log(
    launch: Callable[..., ServiceProcess], identity_bundle_dir: Path, tmp_path: Path
) -> None:
    """On the Milvus backend at debug level, through a Milvus outage (errors logged with the
    server's address): the token never reaches the log."""
    milvus = start_milvus(tmp_path)
    try:
        server = launch(
            identity_bundle_dir,
            tmp_path / "index",
            index_backend="milvus",
            milvus_uri=milvus.uri,
            milvus_token=MILVUS_TOKEN,
            log_level="debug",
        )
        with server.client() as client:
            added = client.post("/documents", json={"documents": [{"text": "hello"}]})
            assert added.status_code == 200, added.text
            milvus.kill()
            down = client.get("/search", params={"q": "hello"})
            assert down.status_code == 503
            assert down.json()["error"]["type"] == "backend_unavailable"
        assert server.stop() in (0, -15)
    finally:
        milvus.kill()
    log = server.log.read_text()
    assert "search failed" in log  # the outage was logged ...
    assert MILVUS_TOKEN not in log and "milvus-password" not in log  # ... without the token
