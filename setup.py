"""The compiled parts: the C2F funnel's native walk and re-rank (index/native_funnel.c), and the
naming of a search's hits (index/native_names.c).

Everything else is in pyproject.toml. Both extensions are optional: where no C compiler is found
the install goes on, the funnel runs through FAISS (index.native_funnel says which) and hits are
named in Python (index.embedded.row_names)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "index._native_funnel",
            ["index/native_funnel.c"],
            extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wno-unused-function"],
            optional=True,
        ),
        Extension(
            "index._native_names",
            ["index/native_names.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall"],
            optional=True,
        ),
    ]
)
