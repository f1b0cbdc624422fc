"""Real servers for the tests: the service, Redis and Prometheus on free loopback ports.

The launchers themselves are :mod:`benchmarks.harness.processes` (shared with the benchmarks);
this module adds what only tests want: a missing binary fails the test under CI (``CI=true``,
where ``.ci/run`` installs it) and skips it elsewhere; the service starts with the test settings
(snapshots only at shutdown, one encoder thread); and a Prometheus server, which only the
observability test runs. Each is started bounded in time and always stopped.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import httpx
import pytest

from benchmarks.harness.processes import (
    INSTALL,
    MILVUS_INSTALL,
    LoopbackServer,
    MilvusServer,
    MissingBinary,
    RedisServer,
    ServiceProcess,
    find_binary,
    start_service,
)

SERVICE_START_TIMEOUT_S = 120.0
GRACEFUL_EXITS = (0, -signal.SIGTERM)
"""Exit statuses after SIGTERM: uvicorn shuts down gracefully, then re-raises the signal."""
TEST_SETTINGS = {"snapshot_interval_s": "0", "encoder_threads": "1"}
"""Snapshots only at shutdown, and one encoder thread: test runs share a small machine."""


def require_binary(name: str, install: str = INSTALL) -> str:
    """The binary's path; a failure under CI, a skip elsewhere, when it is not installed."""
    try:
        return find_binary(name, install)
    except MissingBinary as missing:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(str(missing))
        pytest.skip(str(missing))


def start_redis(directory: Path) -> RedisServer:
    """A started ``redis-server`` in ``directory`` (see :func:`require_binary`)."""
    require_binary("redis-server")
    server = RedisServer(directory)
    server.start()
    return server


def start_milvus(directory: Path) -> MilvusServer:
    """A started ``milvus-lite`` server with its data in ``directory`` (see
    :func:`require_binary`)."""
    require_binary("milvus-lite", MILVUS_INSTALL)
    server = MilvusServer(directory)
    server.start()
    return server


def start_server(
    bundle_dir: Path,
    index_dir: Path,
    log: Path,
    wrapper: Sequence[str] = (),
    **variables: str,
) -> ServiceProcess:
    """``python -m service`` (run by ``wrapper``, if any) with the test settings overridden by
    ``variables``, ready (asked with the first of the ``api_keys``, if any)."""
    api_key = variables.get("api_keys", "").split(",")[0].strip() or None
    return start_service(
        bundle_dir,
        index_dir,
        log,
        ready_timeout_s=SERVICE_START_TIMEOUT_S,
        api_key=api_key,
        wrapper=wrapper,
        **(TEST_SETTINGS | variables),
    )


@dataclass
class PrometheusServer(LoopbackServer):
    """``prometheus`` with a given config (``config``), data in ``directory``."""

    config: Path | None = None
    NAME: ClassVar[str] = "prometheus"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _command(self) -> list[str]:
        assert self.config is not None, "PrometheusServer needs a config file"
        return [
            require_binary("prometheus"),
            f"--config.file={self.config}",
            f"--storage.tsdb.path={self.directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]

    def _ping(self) -> bool:
        try:
            return httpx.get(f"{self.base_url}/-/ready", timeout=1.0).status_code == 200
        except httpx.TransportError:
            return False

    def query(self, promql: str) -> list[dict]:
        """The result vector of an instant query through the HTTP API."""
        response = httpx.get(f"{self.base_url}/api/v1/query", params={"query": promql}, timeout=5)
        response.raise_for_status()
        return response.json()["data"]["result"]
