"""The compiled parts: the C2F funnel's native walk and re-rank (index/native_funnel.c), and the
naming of a search's hits (index/native_names.c).

Everything else is in pyproject.toml. Both extensions are optional: where no C compiler is found
the install goes on, the funnel runs through FAISS (index.native_funnel says which) and hits are
named in Python (index.embedded.row_names). Each module carries the SHA-256 of the source it was
built from (``SOURCE_DIGEST``), so a test can tell a build older than its source."""

import hashlib
from pathlib import Path

from setuptools import Extension, setup


def extension(name: str, source: str, flags: list[str]) -> Extension:
    """The optional extension ``name`` built from ``source`` with ``flags``."""
    digest = hashlib.sha256(Path(source).read_bytes()).hexdigest()
    return Extension(
        name,
        [source],
        define_macros=[("SOURCE_DIGEST", f'"{digest}"')],
        extra_compile_args=["-std=c11", "-Wall", *flags],
        optional=True,
    )


setup(
    ext_modules=[
        extension("index._native_funnel", "index/native_funnel.c", ["-O3", "-Wno-unused-function"]),
        extension("index._native_names", "index/native_names.c", ["-O2"]),
    ]
)
