"""End-to-end fixtures: the service as a real ``python -m service`` process on 127.0.0.1."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from benchmarks.live_service import free_port, service_environment
from tests.service.bundles import identity_bundle, v5_bundle

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
GRACEFUL_EXITS = (0, -signal.SIGTERM)
"""Exit statuses after SIGTERM: uvicorn shuts down gracefully, then re-raises the signal."""


@pytest.fixture(scope="session")
def identity_bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return identity_bundle(tmp_path_factory)


@pytest.fixture(scope="session")
def v5_bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return v5_bundle(tmp_path_factory)


@dataclass
class Server:
    """A running service process and where it listens."""

    process: subprocess.Popen
    base_url: str
    log: Path

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=60.0)

    def stop(self) -> int:
        """SIGTERM (graceful: in-flight requests finish, indexes are snapshotted); exit status."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(STOP_TIMEOUT_S)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs at all."""
        self.process.kill()
        self.process.wait(STOP_TIMEOUT_S)


def start_server(bundle_dir: Path, index_dir: Path, log: Path, **variables: str) -> Server:
    """Start ``python -m service`` and wait until ``/ready`` answers 200 (asked with the first
    of the ``api_keys``, if any)."""
    port = free_port()
    defaults = {"snapshot_interval_s": "0", "encoder_threads": "1"}
    env = service_environment(bundle_dir, index_dir, port, **(defaults | variables))
    with log.open("ab") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "service"], cwd=ROOT, env=env, stdout=output, stderr=output
        )
    server = Server(process, f"http://127.0.0.1:{port}", log)
    keys = variables.get("api_keys", "").split(",")
    probe = {"Authorization": f"Bearer {keys[0].strip()}"} if keys[0] else {}
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the service exited ({process.returncode}): {log.read_text()}")
        try:
            if httpx.get(f"{server.base_url}/ready", headers=probe, timeout=5.0).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    server.kill()
    raise AssertionError(f"the service did not become ready: {log.read_text()}")


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """``launch(bundle_dir, index_dir, **settings)``; every server still running is killed at
    the end of the test."""
    servers: list[Server] = []

    def start(bundle_dir: Path, index_dir: Path, **variables: str) -> Server:
        server = start_server(bundle_dir, index_dir, tmp_path / "service.log", **variables)
        servers.append(server)
        return server

    yield start
    for server in servers:
        if server.process.poll() is None:
            server.kill()
