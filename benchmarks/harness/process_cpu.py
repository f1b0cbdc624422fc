"""A process's CPU time as ``/proc/PID/stat`` reports it (all its threads, user and system)."""

from __future__ import annotations

import os
from pathlib import Path

USER_TIME_FIELD = 11
"""``utime``'s position in ``/proc/PID/stat`` after the command name (``stime`` follows)."""


def cpu_seconds(pid: int) -> float:
    """The CPU seconds process ``pid`` has used so far (Linux)."""
    stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    fields = stat.rsplit(")", 1)[1].split()  # the command name may hold spaces
    ticks = int(fields[USER_TIME_FIELD]) + int(fields[USER_TIME_FIELD + 1])
    return ticks / os.sysconf("SC_CLK_TCK")
