"""Helpers for the service tests: settings in a temporary index dir, the app in process, ingest."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from service.app import create_app
from service.runtime import Runtime
from service.settings import Settings
from support.client import FractalClient


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


def add_documents(client: TestClient, texts: list[str], batch: int = 100) -> list[str]:
    """Add ``texts`` as documents (metadata: their position) and return their ids."""
    documents = [{"text": text, "metadata": {"position": i}} for i, text in enumerate(texts)]
    return FractalClient(client).add_documents(documents, batch_size=batch)
