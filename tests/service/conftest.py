"""Fixtures for the service tests (the bundles are in ``tests/conftest.py``, the helpers in
:mod:`tests.service.helpers`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from service.settings import Settings
from tests.service.helpers import make_settings


@pytest.fixture
def settings_for(tmp_path: Path) -> Callable[..., Settings]:
    """``settings_for(bundle_dir, **overrides)``: settings with an index dir in ``tmp_path``."""

    def build(bundle_dir: Path, **overrides: Any) -> Settings:
        return make_settings(bundle_dir, tmp_path / "index", **overrides)

    return build
