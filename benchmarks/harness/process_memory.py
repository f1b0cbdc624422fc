"""A process's memory as ``/proc/PID/status`` reports it, once or every second of a run."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from types import TracebackType


def status_bytes(pid: int, field: str = "VmRSS") -> int:
    """A memory line of ``/proc/PID/status`` in bytes: ``VmRSS`` (resident memory), ``RssAnon``
    (its anonymous part)…"""
    status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    match = re.search(rf"^{field}:\s+(\d+) kB", status, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no {field} in /proc/{pid}/status")
    return int(match.group(1)) * 1024


class RssSampler:
    """Within a ``with`` block, the process's ``VmRSS`` every ``interval_s`` on a thread:
    ``samples`` is a list of ``(seconds since the block started, bytes)``, the first taken at
    the start. A process that has exited ends the sampling."""

    def __init__(self, pid: int, interval_s: float = 1.0) -> None:
        self.pid, self.interval_s = pid, interval_s
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._started = 0.0

    def _sample(self) -> None:
        while True:
            try:
                rss = status_bytes(self.pid)
            except (OSError, RuntimeError):
                return
            self.samples.append((time.perf_counter() - self._started, rss))
            if self._stop.wait(self.interval_s):
                return

    def __enter__(self) -> RssSampler:
        self._started = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
