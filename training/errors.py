"""The one exception type the CLI turns into a clean message and a non-zero exit."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from bundle import BundleError


class FractalError(Exception):
    """A problem with the user's input (data, options, files) that they can fix.

    The CLI prints ``error: <message>`` and exits with status 2, without a traceback.
    """


@contextmanager
def bundle_errors_as_fractal() -> Iterator[None]:
    """Re-raise a :class:`bundle.BundleError` from inside the block (an unreadable source bundle,
    an occupied output folder) as a :class:`FractalError` with the same message."""
    try:
        yield
    except BundleError as exc:
        raise FractalError(str(exc)) from exc
