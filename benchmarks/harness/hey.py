"""Rate-limited HTTP load from ``hey`` (Debian package ``hey``), with latency per status.

:func:`start_hey` runs ``hey -n N -c C -q R/C -o csv``: ``C`` workers, each sending one request
at a time at most ``R/C`` times a second, ``N`` requests in all (``R × seconds``, a multiple of
``C``). While every worker keeps up (its answers take less than ``C/R`` seconds) that is an
offered rate of ``R`` requests a second, whatever the service does; a worker whose answer comes
later sends its next request as soon as it has one, so keep ``C`` large enough
(:func:`workers_for`). hey's workers start together and tick on the same period, so requests
leave in bursts of up to ``C``: the offered load is bursty, not Poisson.

hey's CSV has one row per *answered* request (latency, status, when it was sent); requests
that got no answer (a timeout, a reset or refused connection) are left out of it, so they are
counted as the requests asked for minus the rows (``transport_errors``). The CPU the generator
used is its own ``rusage``, so several hey processes at once are told apart.
"""

from __future__ import annotations

import csv
import io
import math
import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass

import numpy as np

from benchmarks.harness.wrk import HttpRequest, pinned

MS = 1000.0
STATUS_COLUMN, LATENCY_COLUMN, OFFSET_COLUMN = "status-code", "response-time", "offset"


@dataclass(frozen=True)
class Answered:
    """The answers of one status: how many, and their latency (ms)."""

    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float


@dataclass(frozen=True)
class HeyRows:
    """hey's CSV as arrays: each answered request's latency (s), status and send time (s after
    the start)."""

    latency_s: np.ndarray
    status: np.ndarray
    offset_s: np.ndarray

    def __len__(self) -> int:
        return len(self.status)

    def answered(self) -> dict[str, Answered]:
        """Count and latency percentiles of every status, in status order."""
        found = {}
        for status in np.unique(self.status):
            ms = self.latency_s[self.status == status] * MS
            found[str(int(status))] = Answered(
                count=len(ms),
                p50_ms=float(np.percentile(ms, 50)),
                p99_ms=float(np.percentile(ms, 99)),
                max_ms=float(ms.max()),
            )
        return found


def parse_hey_csv(text: str) -> HeyRows:
    """hey's ``-o csv`` output (a header, then one row per answered request)."""
    reader = csv.DictReader(io.StringIO(text.strip()))
    rows = [row for row in reader if row.get(STATUS_COLUMN)]
    return HeyRows(
        latency_s=np.array([float(row[LATENCY_COLUMN]) for row in rows]),
        status=np.array([int(row[STATUS_COLUMN]) for row in rows], dtype=np.int64),
        offset_s=np.array([float(row[OFFSET_COLUMN]) for row in rows]),
    )


@dataclass(frozen=True)
class HeyResult:
    """One hey run: what was asked, what came back per status, and what did not come back."""

    rate_asked: float
    workers: int
    requests: int
    """Requests hey was told to send."""
    seconds: float
    """Wall time of the run."""
    answered: dict[str, Answered]
    transport_errors: int
    """Requests that got no answer: timeouts, resets, refused connections."""
    last_sent_s: float
    """When the last answered request was sent, in seconds after hey started."""
    client_cpu_percent: float

    def count(self, *statuses: str) -> int:
        """Answers whose status starts with any of ``statuses`` (``"2"``: every 2xx)."""
        return sum(a.count for s, a in self.answered.items() if s.startswith(statuses))

    def to_json(self) -> dict:
        return asdict(self)


def hey_binary() -> str:
    path = shutil.which("hey")
    if path is None:
        raise SystemExit("error: hey is not installed (apt-get install hey)")
    return path


def workers_for(rate: float, per_worker_rate: float) -> int:
    """Workers for ``rate`` requests a second when each sends at most ``per_worker_rate``."""
    return max(1, math.ceil(rate / per_worker_rate))


class HeyRun:
    """A started hey process; :meth:`result` waits for it and reads its CSV."""

    def __init__(
        self,
        base_url: str,
        request: HttpRequest,
        rate: float,
        seconds: float,
        workers: int,
        timeout_s: float,
        cpus: str | None,
    ) -> None:
        self.rate, self.workers = rate, workers
        per_worker = max(1, round(rate * seconds / workers))
        self.requests = per_worker * workers
        command = [
            hey_binary(),
            "-n",
            str(self.requests),
            "-c",
            str(workers),
            "-q",
            f"{rate / workers:.6f}",
            "-t",
            str(max(1, math.ceil(timeout_s))),
            "-m",
            request.method,
            "-o",
            "csv",
        ]
        if cpus is not None:
            command += ["-cpus", str(len(cpus.split(",")))]
        if request.body is not None:
            command += ["-T", "application/json", "-d", request.body]
        self.rows: HeyRows | None = None
        self.output = tempfile.TemporaryFile()
        self.errors = tempfile.TemporaryFile()
        self.deadline_s = seconds * 10 + timeout_s + 60
        self.started = time.perf_counter()
        self.process = subprocess.Popen(
            pinned([*command, base_url + request.path], cpus),
            stdout=self.output,
            stderr=self.errors,
        )

    def result(self) -> HeyResult:
        """Wait for hey (killed after ten times its planned duration: then an error); its
        result. Its rows are kept in ``rows``."""
        timer = threading.Timer(self.deadline_s, self.process.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(self.process.pid, 0)
        finally:
            timer.cancel()
        self.process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - self.started
        self.output.seek(0)
        self.errors.seek(0)
        text, errors = self.output.read().decode(), self.errors.read().decode()
        self.output.close()
        self.errors.close()
        if self.process.returncode != 0:
            raise RuntimeError(f"hey failed ({self.process.returncode}): {errors[-500:]}")
        rows = self.rows = parse_hey_csv(text)
        return HeyResult(
            rate_asked=self.rate,
            workers=self.workers,
            requests=self.requests,
            seconds=wall,
            answered=rows.answered(),
            transport_errors=self.requests - len(rows),
            last_sent_s=float(rows.offset_s.max()) if len(rows) else 0.0,
            client_cpu_percent=100.0 * (usage.ru_utime + usage.ru_stime) / wall,
        )


def start_hey(
    base_url: str,
    request: HttpRequest,
    rate: float,
    seconds: float,
    workers: int,
    timeout_s: float = 10.0,
    cpus: str | None = None,
) -> HeyRun:
    """Start hey offering ``request`` to ``base_url`` at ``rate`` a second for ``seconds`` from
    ``workers`` workers (each request times out after ``timeout_s``); on ``cpus`` if given."""
    return HeyRun(base_url, request, rate, seconds, workers, timeout_s, cpus)


def run_hey(
    base_url: str,
    request: HttpRequest,
    rate: float,
    seconds: float,
    workers: int,
    timeout_s: float = 10.0,
    cpus: str | None = None,
) -> HeyResult:
    """:func:`start_hey` and wait for its result."""
    return start_hey(base_url, request, rate, seconds, workers, timeout_s, cpus).result()
