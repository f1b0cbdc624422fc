"""HTTP load from ``wrk``, the compiled load generator, instead of a Python client.

A Python client on the same two cores as the service measured half the service's capacity, so
load tests drive the service with ``wrk`` (Debian package ``wrk``). :func:`run_wrk` sends GET
requests that cycle through a list of paths (one Lua script per run), at a fixed number of open
connections for a fixed time, and returns throughput, latency percentiles, errors by kind, and
the CPU the generator itself used (so a reader can tell when the client, not the service, was
the limit).
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

RESULT_MARK = "WRK_RESULT "
SCRIPT = """
local paths = {%s}
local counter = 0
function setup(thread)
  thread:set("offset", counter)
  counter = counter + 997
end
function init(args)
  position = offset
end
function request()
  position = position + 1
  return wrk.format("GET", paths[(position %% #paths) + 1])
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "%s{\\"requests\\": %%d, \\"duration_us\\": %%d, \\"connect\\": %%d, \\"read\\": %%d, " ..
    "\\"write\\": %%d, \\"status\\": %%d, \\"timeout\\": %%d, \\"p50_us\\": %%d, " ..
    "\\"p90_us\\": %%d, \\"p99_us\\": %%d, \\"mean_us\\": %%.1f}\\n",
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean))
end
"""


@dataclass(frozen=True)
class WrkResult:
    """One wrk run: requests completed, QPS, latency (ms), errors, and wrk's own CPU use."""

    connections: int
    seconds: float
    requests: int
    qps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    errors: dict[str, int]
    client_cpu_percent: float
    """wrk's user + system CPU time over the run's wall time (100 = one core busy)."""

    def to_json(self) -> dict:
        return asdict(self)


def wrk_binary() -> str:
    path = shutil.which("wrk")
    if path is None:
        raise SystemExit("error: wrk is not installed (apt-get install wrk)")
    return path


def _lua_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def run_wrk(
    base_url: str,
    paths: Sequence[str],
    connections: int,
    seconds: float,
    threads: int = 1,
    timeout_s: float = 10.0,
) -> WrkResult:
    """``wrk`` against ``base_url`` for ``seconds`` with ``connections`` open connections (at
    least one per thread), each request the next of ``paths`` (already URL-encoded)."""
    if not paths:
        raise ValueError("wrk needs at least one request path")
    threads = max(1, min(threads, connections))
    script = SCRIPT % (", ".join(_lua_string(path) for path in paths), RESULT_MARK)
    with tempfile.TemporaryDirectory() as folder:
        script_path = Path(folder) / "paths.lua"
        script_path.write_text(script, encoding="utf-8")
        command = [
            wrk_binary(),
            f"--threads={threads}",
            f"--connections={connections}",
            f"--duration={max(1, round(seconds))}s",
            f"--timeout={max(1, round(timeout_s))}s",
            f"--script={script_path}",
            base_url,
        ]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        completed = subprocess.run(
            command, capture_output=True, text=True, timeout=seconds + timeout_s + 30
        )
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if completed.returncode != 0:
        raise RuntimeError(f"wrk failed ({completed.returncode}): {completed.stderr[-500:]}")
    lines = [line for line in completed.stdout.splitlines() if line.startswith(RESULT_MARK)]
    if not lines:
        raise RuntimeError(f"wrk printed no result: {completed.stdout[-500:]}")
    raw = json.loads(lines[-1].removeprefix(RESULT_MARK))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    duration_s = raw["duration_us"] / 1e6
    return WrkResult(
        connections=connections,
        seconds=round(duration_s, 3),
        requests=raw["requests"],
        qps=raw["requests"] / duration_s if duration_s else 0.0,
        p50_ms=raw["p50_us"] / 1e3,
        p90_ms=raw["p90_us"] / 1e3,
        p99_ms=raw["p99_us"] / 1e3,
        mean_ms=raw["mean_us"] / 1e3,
        errors={key: raw[key] for key in ("connect", "read", "write", "status", "timeout")},
        client_cpu_percent=100.0 * cpu / wall if wall else 0.0,
    )

