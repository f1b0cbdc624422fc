"""End-to-end fixtures: the service as a real ``python -m service`` process on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from benchmarks.harness.processes import ServiceProcess
from tests.servers import start_server


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Callable[..., ServiceProcess]]:
    """``launch(bundle_dir, index_dir, wrapper=(), **settings)``; every server still running is
    killed at the end of the test."""
    servers: list[ServiceProcess] = []

    def start(
        bundle_dir: Path, index_dir: Path, wrapper: Sequence[str] = (), **variables: str
    ) -> ServiceProcess:
        server = start_server(bundle_dir, index_dir, tmp_path / "service.log", wrapper, **variables)
        servers.append(server)
        return server

    yield start
    for server in servers:
        if server.process.poll() is None:
            server.kill()
