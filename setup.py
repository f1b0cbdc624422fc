"""The one compiled part: the C2F funnel's native walk and re-rank (index/native_funnel.c).

Everything else is in pyproject.toml. The extension is optional: where no C compiler is found the
install goes on, and the funnel runs through FAISS (index.native_funnel says which)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "index._native_funnel",
            ["index/native_funnel.c"],
            extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wno-unused-function"],
            optional=True,
        )
    ]
)
