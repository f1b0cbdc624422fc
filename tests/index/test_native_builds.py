"""The compiled extensions (setup.py): built in CI, and built from the sources beside them."""

from __future__ import annotations

import hashlib
import importlib
import os
from pathlib import Path

import pytest

from index import native

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(native.SOURCES))
def test_each_extension_is_built_from_its_source(name: str) -> None:
    """CI installs with a C compiler, so each is built there; wherever one is built, it is
    built from the source now in the tree (an older build would hide a change to it)."""
    try:
        module = importlib.import_module(name)
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"{name} is not built here")
    source = (ROOT / native.SOURCES[name]).read_bytes()
    assert module.SOURCE_DIGEST == hashlib.sha256(source).hexdigest(), (
        f"{name} was built from another version of {native.SOURCES[name]}: "
        "rebuild it (pip install -e . or python setup.py build_ext --inplace)"
    )


def test_an_unknown_extension_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown extension 'index._nope'"):
        native.load("index._nope")
