"""Start the real service for an HTTP benchmark: ``python -m service`` on a free loopback port.

    with live_service(bundle, index_dir, log, index_kinds="hnsw") as base_url:
        httpx.get(f"{base_url}/info")

Keyword settings become ``FRACTAL_*`` variables (``index_kinds`` → ``FRACTAL_INDEX_KINDS``); the
caller's other ``FRACTAL_*`` variables are dropped so that a run states every setting it uses.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

READY_TIMEOUT_S = 600.0
"""Opening a large index folder (snapshots checked against the store) can take minutes."""
STOP_TIMEOUT_S = 120.0
"""A graceful stop writes the index snapshots; a 100K-document HNSW graph takes a while."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def service_environment(
    bundle: Path, index_dir: Path, port: int, **settings: object
) -> dict[str, str]:
    """This process's environment without its ``FRACTAL_*`` variables, plus the service's
    bundle, index folder, loopback port, ``warning`` log level and ``settings``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("FRACTAL_")}
    env.update(
        FRACTAL_BUNDLE_DIR=str(bundle),
        FRACTAL_INDEX_DIR=str(index_dir),
        FRACTAL_HOST="127.0.0.1",
        FRACTAL_PORT=str(port),
        FRACTAL_LOG_LEVEL="warning",
    )
    env.update({f"FRACTAL_{name.upper()}": str(value) for name, value in settings.items()})
    return env


@contextmanager
def live_service(bundle: Path, index_dir: Path, log: Path, **settings: object) -> Iterator[str]:
    """Run the service until the block ends (SIGTERM, then SIGKILL after ``STOP_TIMEOUT_S``);
    yield its base URL once ``/ready`` answers 200. Its output goes to ``log``."""
    port = free_port()
    env = service_environment(bundle, index_dir, port, **settings)
    base_url = f"http://127.0.0.1:{port}"
    with log.open("ab") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "service"], env=env, stdout=output, stderr=output
        )
    try:
        _wait_ready(process, base_url, log)
        yield base_url
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_ready(process: subprocess.Popen, base_url: str, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(encoding="utf-8", errors="replace")[-2000:]
            raise SystemExit(f"the service exited with status {process.returncode}:\n{tail}")
        try:
            if httpx.get(f"{base_url}/ready", timeout=5.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    process.kill()
    raise SystemExit(f"the service was not ready within {READY_TIMEOUT_S:.0f} s (log: {log})")
