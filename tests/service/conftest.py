"""Fixtures for the service tests: real bundles, settings in temporary index dirs, and clients
that run the app's whole lifespan (bundle, ONNX sessions, SQLite store, FAISS indexes)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from service.app import create_app
from service.runtime import Runtime
from service.settings import Settings
from tests.service.bundles import identity_bundle, v5_bundle


@pytest.fixture(scope="session")
def identity_bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return identity_bundle(tmp_path_factory)


@pytest.fixture(scope="session")
def v5_bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return v5_bundle(tmp_path_factory)


def make_settings(bundle_dir: Path, index_dir: Path, **overrides: Any) -> Settings:
    """Settings for a test: snapshots only at shutdown and one encoder thread (test runs share
    a small machine, where more threads contend), everything else as given or default."""
    values: dict[str, Any] = {"snapshot_interval_s": 0, "encoder_threads": 1, **overrides}
    return Settings(bundle_dir=bundle_dir, index_dir=index_dir, **values)


@contextmanager
def serve(
    settings: Settings, runtime: Runtime | None = None, raise_server_exceptions: bool = True
) -> Iterator[TestClient]:
    """A client of the app, started (lifespan run) on entry and stopped on exit."""
    app = create_app(settings, runtime)
    with TestClient(app, raise_server_exceptions=raise_server_exceptions) as client:
        yield client


@pytest.fixture
def settings_for(tmp_path: Path) -> Callable[..., Settings]:
    """``settings_for(bundle_dir, **overrides)``: settings with an index dir in ``tmp_path``."""

    def build(bundle_dir: Path, **overrides: Any) -> Settings:
        return make_settings(bundle_dir, tmp_path / "index", **overrides)

    return build


def add_documents(client: TestClient, texts: list[str], batch: int = 100) -> list[str]:
    """Add ``texts`` as documents (metadata: their position) and return their ids."""
    ids: list[str] = []
    for start in range(0, len(texts), batch):
        documents = [
            {"text": text, "metadata": {"position": start + offset}}
            for offset, text in enumerate(texts[start : start + batch])
        ]
        response = client.post("/documents", json={"documents": documents})
        assert response.status_code == 200, response.text
        ids += response.json()["ids"]
    return ids


def metric_samples(client: TestClient | httpx.Client) -> dict[tuple[str, frozenset], float]:
    """Every sample the service's ``/metrics`` exports, keyed by name and labels."""
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def metric(samples: dict[tuple[str, frozenset], float], name: str, **labels: str) -> float:
    """One sample's value (0 when the service has not exported it yet)."""
    return samples.get((name, frozenset(labels.items())), 0.0)
