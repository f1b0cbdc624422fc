"""Helpers for the service tests: settings in a temporary index dir, the app in process, ingest."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from client import FractalClient
from index.catalog import COLLECTIONS_DIR, milvus_collection_name
from index.milvus import MilvusConnection
from index.milvus.opening import id_of
from service.app import create_app
from service.runtime import Runtime
from service.settings import Settings


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


def _milvus(settings: Settings) -> MilvusConnection:
    return MilvusConnection(settings.milvus_uri, None, settings.milvus_timeout_s)


def stored_texts(settings: Settings) -> dict[str, str]:
    """What the default collection's store of record holds (id → text), read from the backend
    itself: the SQLite file, or the Milvus collection."""
    if settings.index_backend == "embedded":
        with closing(sqlite3.connect(settings.index_dir / "store.sqlite3")) as db:
            return dict(db.execute("SELECT doc_id, text FROM documents"))
    connection = _milvus(settings)
    name = milvus_collection_name(settings.milvus_prefix, None)
    try:
        rows = connection.call(
            "query",
            lambda client: client.query(
                name, filter='key != ""', output_fields=["key", "text"], limit=16_384
            ),
        )
    finally:
        connection.close()
    return {id_of(row["key"]): row["text"] for row in rows}


def collection_data_exists(settings: Settings, name: str) -> bool:
    """Whether a named collection's data is still in the backend (its folder, or its Milvus
    collection)."""
    if settings.index_backend == "embedded":
        return (settings.index_dir / COLLECTIONS_DIR / name).exists()
    connection = _milvus(settings)
    milvus_name = milvus_collection_name(settings.milvus_prefix, name)
    try:
        return connection.call("has_collection", lambda client: client.has_collection(milvus_name))
    finally:
        connection.close()
