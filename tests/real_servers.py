"""Real Redis and Prometheus servers for the tests, on free loopback ports in temporary dirs.

Each is started bounded in time and always stopped. A missing binary fails the test under CI
(``CI=true``, where ``.ci/run`` installs them) and skips it elsewhere, naming the install command.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import redis

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
INSTALL = "apt-get install -y redis-server prometheus docker-compose"


def require_binary(name: str) -> str:
    """The binary's path; a failure under CI, a skip elsewhere, when it is not installed."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed; install it with: {INSTALL}"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = START_TIMEOUT_S) -> None:
    """Poll ``check()`` until it is true, or fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


@dataclass
class RedisServer:
    """``redis-server`` without persistence on 127.0.0.1:``port``; restartable on that port."""

    directory: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = [require_binary("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no", "--dir", str(self.directory)]
        log = (self.directory / "redis.log").open("ab")
        self.process = subprocess.Popen(command, stdout=log, stderr=log)
        wait_until(self._answers, f"redis-server on port {self.port}")

    def _answers(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            log = (self.directory / "redis.log").read_text()
            raise AssertionError(f"redis-server exited: {log[-2000:]}")
        try:
            with redis.Redis(port=self.port, socket_timeout=1.0) as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    def kill(self) -> None:
        """SIGKILL: Redis vanishes mid-conversation, as in a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT_S)

    def pause(self) -> None:
        """SIGSTOP: Redis still accepts connections but answers nothing (a hung server)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5.0)


@dataclass
class PrometheusServer:
    """``prometheus`` with a given config on 127.0.0.1:``port``, data in a temporary dir."""

    directory: Path
    config: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        command = [
            require_binary("prometheus"),
            f"--config.file={self.config}",
            f"--storage.tsdb.path={self.directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]
        log = (self.directory / "prometheus.log").open("ab")
        self.process = subprocess.Popen(command, stdout=log, stderr=log)
        wait_until(self._ready, f"prometheus on port {self.port}")

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            log = (self.directory / "prometheus.log").read_text()
            raise AssertionError(f"prometheus exited: {log[-2000:]}")
        try:
            return httpx.get(f"{self.base_url}/-/ready", timeout=1.0).status_code == 200
        except httpx.TransportError:
            return False

    def query(self, promql: str) -> list[dict]:
        """The result vector of an instant query through the HTTP API."""
        response = httpx.get(f"{self.base_url}/api/v1/query", params={"query": promql}, timeout=5)
        response.raise_for_status()
        return response.json()["data"]["result"]

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT_S)
