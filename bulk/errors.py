"""The one error type of the bulk tools."""

from __future__ import annotations

from pathlib import Path


class BulkError(Exception):
    """Input the bulk tools refuse: a corpus or shard, or an option, the user can fix.

    The message is one line naming the file and, where it applies, the row; ``fractal`` prints
    it as ``error: <message>`` and exits with status 2.
    """


def where(path: Path, row: int | None = None, unit: str = "row") -> str:
    """``path`` or ``path, row N`` (``path, line N`` with ``unit="line"``): the place a message
    names (rows and lines count from 1)."""
    return f"{path}" if row is None else f"{path}, {unit} {row}"
