"""Fixtures shared by every test package: bundles to serve and a real Redis server.

The identity and V5 bundles are exported from MiniLM with torch (skipped where torch is
absent); the tiny bundle is made with ``onnx`` alone (:mod:`tests.tiny_bundle`).

Tests under ``tests/e2e`` are marked ``e2e`` and those under ``tests/benchmarks`` ``benchmark``,
so that ``python -m pytest -m "not e2e and not benchmark"`` runs the fast core alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.harness.processes import MilvusServer, RedisServer
from tests.servers import start_milvus, start_redis
from tests.service.bundles import identity_bundle, v5_bundle
from tests.tiny_bundle import build_tiny_bundle

PACKAGE_MARKERS = {"e2e": pytest.mark.e2e, "benchmarks": pytest.mark.benchmark}
RUN_ORDER = {"e2e": 1, "benchmarks": 2}
"""Test packages that run after the core (0), in this order."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test by the test package it lives in (see the module docstring), and run the
    fast core first, then the end-to-end tests, then the benchmarks' smoke tests: a failure in
    the core shows within minutes. The order within each group is unchanged."""
    tests_dir = Path(__file__).parent
    group = {}
    for item in items:
        package = item.path.relative_to(tests_dir).parts[0]
        if package in PACKAGE_MARKERS:
            item.add_marker(PACKAGE_MARKERS[package])
        group[item.nodeid] = RUN_ORDER.get(package, 0)
    items.sort(key=lambda item: group[item.nodeid])


@pytest.fixture(scope="session")
def identity_bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return identity_bundle(tmp_path_factory)


@pytest.fixture(scope="session")
def v5_bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return v5_bundle(tmp_path_factory)


@pytest.fixture(scope="session")
def tiny_bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tiny-bundle")
    build_tiny_bundle(directory)
    return directory


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A fresh, empty ``redis-server`` for one test; killed at the end."""
    directory = tmp_path / "redis"
    directory.mkdir()
    server = start_redis(directory)
    try:
        yield server
    finally:
        server.resume()
        server.kill()


@pytest.fixture(scope="session")
def milvus_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MilvusServer]:
    """One ``milvus-lite`` server for the session (tests keep apart by collection prefix,
    ``FRACTAL_MILVUS_PREFIX``); stopped at the end. Tests that kill it start their own."""
    server = start_milvus(tmp_path_factory.mktemp("milvus"))
    try:
        yield server
    finally:
        server.stop()
