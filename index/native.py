"""The optional compiled extensions that ``setup.py`` builds beside their C sources: each is
loaded once by the module that uses it, which keeps a Python path for where it was not built
(no C compiler at install)."""

from __future__ import annotations

import importlib
from types import ModuleType

SOURCES = {
    "index._native_funnel": "index/native_funnel.c",
    "index._native_names": "index/native_names.c",
}
"""Each extension's module name and the C source it is built from."""


def load(name: str) -> ModuleType | None:
    """The extension ``name`` (a key of :data:`SOURCES`), or None where it was not built."""
    if name not in SOURCES:
        raise ValueError(f"unknown extension {name!r}; known: {', '.join(SOURCES)}")
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
