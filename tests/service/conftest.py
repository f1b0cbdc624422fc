"""Fixtures for the service tests (the bundles are in ``tests/conftest.py``, the helpers in
:mod:`tests.service.helpers`)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bundle import load_bundle
from encoding.encoder import OnnxEncoder
from service.settings import Settings
from tests.service.helpers import make_settings


@pytest.fixture
def settings_for(tmp_path: Path) -> Callable[..., Settings]:
    """``settings_for(bundle_dir, **overrides)``: settings with an index dir in ``tmp_path``."""

    def build(bundle_dir: Path, **overrides: Any) -> Settings:
        return make_settings(bundle_dir, tmp_path / "index", **overrides)

    return build


@pytest.fixture(scope="module", params=["embedded", "milvus"])
def backend(request: pytest.FixtureRequest) -> Callable[[], dict[str, Any]]:
    """The index backend a module's contract tests run on: ``backend()`` gives its settings
    overrides, each call a fresh (empty) Milvus namespace, against the session's real
    milvus-lite server."""
    if request.param == "embedded":
        return dict
    server = request.getfixturevalue("milvus_server")

    def milvus() -> dict[str, Any]:
        return {
            "index_backend": "milvus",
            "milvus_uri": server.uri,
            "milvus_prefix": f"t{uuid.uuid4().hex[:16]}",
        }

    return milvus


@pytest.fixture
def anyio_backend() -> str:
    """Async tests (``pytest.mark.anyio``) run on asyncio, as the service does."""
    return "asyncio"


@pytest.fixture(scope="module")
def encoder(tiny_bundle_dir: Path) -> OnnxEncoder:
    """The tiny bundle's real encoder, on one thread."""
    return OnnxEncoder(tiny_bundle_dir, load_bundle(tiny_bundle_dir), threads=1)
