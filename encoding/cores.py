"""The cores this process may run on: the default thread count of the service's encoder and
search, and the default number of ``fractal embed`` workers."""

from __future__ import annotations

import os


def available_cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
