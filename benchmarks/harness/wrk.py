"""Closed-loop HTTP load from ``wrk``, the compiled load generator, instead of a Python client.

A Python client on the same two cores as the service measured half the service's capacity, so
load tests drive the service with ``wrk`` (Debian package ``wrk``). :func:`run_wrk` keeps a fixed
number of connections busy for a fixed time, each sending its next request as soon as the last
one is answered; the requests cycle through a list of :class:`HttpRequest` (GETs, or POSTs with a
JSON body), formatted once per thread by a Lua script. It returns throughput, latency
percentiles, errors by kind and the CPU the generator itself used (so a reader can tell when the
client, not the service, was the limit).

wrk keeps one latency histogram for every answer, whatever its status; answers with a status of
400 or more are counted (``errors["status"]``) but not told apart. With ``count_statuses`` the
script also tallies the answers by status in wrk's Lua ``response()`` callback, which makes wrk
read every answer's headers and body into Lua: it costs the generator CPU (see
``client_cpu_percent``), so capacity runs leave it off. Latency per status (how fast a 429
comes back) needs one row per request: :mod:`benchmarks.harness.hey`.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

RESULT_MARK = "WRK_RESULT "
SCRIPT = """
local sources = {{requests}}
local counter = 0
local threads = {}
function setup(thread)
  thread:set("offset", counter)
  counter = counter + 997
  table.insert(threads, thread)
end
function init(args)
  formatted = {}
  for i, r in ipairs(sources) do
    local headers = nil
    if r[3] then headers = {["Content-Type"] = "application/json"} end
    formatted[i] = wrk.format(r[1], r[2], headers, r[3])
  end
  position = offset
  statuses = {}
end
function request()
  position = position + 1
  return formatted[(position % #formatted) + 1]
end
{{response}}
function done(summary, latency, requests)
  local e = summary.errors
  local counts = {}
  for _, thread in ipairs(threads) do
    for status, n in pairs(thread:get("statuses") or {}) do
      table.insert(counts, string.format('"%d": %d', status, n))
    end
  end
  io.write(string.format(
    '{{mark}}{"requests": %d, "duration_us": %d, "connect": %d, "read": %d, ' ..
    '"write": %d, "status": %d, "timeout": %d, "p50_us": %d, ' ..
    '"p90_us": %d, "p99_us": %d, "mean_us": %.1f, "statuses": [{%s}]}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean,
    table.concat(counts, "}, {")))
end
"""
RESPONSE = """
function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end
"""
ERROR_KINDS = ("connect", "read", "write", "status", "timeout")
"""wrk's error counters: socket errors (a reset is a read or write error), timeouts, and
answers with a status of 400 or more."""


@dataclass(frozen=True)
class HttpRequest:
    """One request a load generator sends: method, path (URL-encoded, query included) and an
    optional JSON body (sent with ``Content-Type: application/json``)."""

    method: str
    path: str
    body: str | None = None

    @classmethod
    def post_json(cls, path: str, payload: object) -> HttpRequest:
        return cls("POST", path, json.dumps(payload))

    @property
    def headers(self) -> dict[str, str]:
        return {} if self.body is None else {"Content-Type": "application/json"}


@dataclass(frozen=True)
class WrkResult:
    """One wrk run: requests completed, QPS, latency (ms), errors, and wrk's own CPU use."""

    connections: int
    seconds: float
    requests: int
    qps: float
    ok_qps: float
    """Answers with a status below 400, per second."""
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    errors: dict[str, int]
    client_cpu_percent: float
    """wrk's user + system CPU time over the run's wall time (100 = one core busy)."""
    statuses: dict[str, int] = field(default_factory=dict)
    """Answers by status, when counted (``count_statuses``)."""

    def to_json(self) -> dict:
        return asdict(self)


def wrk_binary() -> str:
    path = shutil.which("wrk")
    if path is None:
        raise SystemExit("error: wrk is not installed (apt-get install wrk)")
    return path


def has_wrk() -> bool:
    return shutil.which("wrk") is not None


def pinned(command: list[str], cpus: str | None) -> list[str]:
    """``command`` run on the CPUs ``cpus`` names (a ``taskset`` list, ``"1"``), or as is."""
    return command if cpus is None else ["taskset", "--cpu-list", cpus, *command]


def _lua_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def lua_requests(requests: Sequence[str | HttpRequest]) -> str:
    """The Lua table of ``{method, path, body}`` the script formats; a string is a GET path."""
    entries = []
    for item in requests:
        request = HttpRequest("GET", item) if isinstance(item, str) else item
        body = "nil" if request.body is None else _lua_string(request.body)
        entries.append(f"{{{_lua_string(request.method)}, {_lua_string(request.path)}, {body}}}")
    return "{" + ",\n".join(entries) + "}"


def wrk_script(requests: Sequence[str | HttpRequest], count_statuses: bool) -> str:
    return (
        SCRIPT.replace("{{requests}}", lua_requests(requests))
        .replace("{{response}}", RESPONSE if count_statuses else "")
        .replace("{{mark}}", RESULT_MARK)
    )


def child_cpu_seconds() -> float:
    """User + system CPU time of this process's finished children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_wrk(
    base_url: str,
    requests: Sequence[str | HttpRequest],
    connections: int,
    seconds: float,
    threads: int = 1,
    timeout_s: float = 10.0,
    *,
    count_statuses: bool = False,
    cpus: str | None = None,
) -> WrkResult:
    """``wrk`` against ``base_url`` for ``seconds`` with ``connections`` open connections (at
    least one per thread), each request the next of ``requests`` (a string is a GET path,
    already URL-encoded); on the CPUs ``cpus`` names when given."""
    if not requests:
        raise ValueError("wrk needs at least one request")
    threads = max(1, min(threads, connections))
    with tempfile.TemporaryDirectory() as folder:
        script_path = Path(folder) / "requests.lua"
        script_path.write_text(wrk_script(requests, count_statuses), encoding="utf-8")
        command = [
            wrk_binary(),
            f"--threads={threads}",
            f"--connections={connections}",
            f"--duration={max(1, round(seconds))}s",
            f"--timeout={max(1, round(timeout_s))}s",
            f"--script={script_path}",
            base_url,
        ]
        before = child_cpu_seconds()
        started = time.perf_counter()
        completed = subprocess.run(
            pinned(command, cpus),
            capture_output=True,
            text=True,
            timeout=seconds + timeout_s + 30,
        )
        wall = time.perf_counter() - started
        cpu = child_cpu_seconds() - before
    if completed.returncode != 0:
        raise RuntimeError(f"wrk failed ({completed.returncode}): {completed.stderr[-500:]}")
    lines = [line for line in completed.stdout.splitlines() if line.startswith(RESULT_MARK)]
    if not lines:
        raise RuntimeError(f"wrk printed no result: {completed.stdout[-500:]}")
    raw = json.loads(lines[-1].removeprefix(RESULT_MARK))
    duration_s = raw["duration_us"] / 1e6
    statuses: dict[str, int] = {}
    for counts in raw["statuses"]:
        for status, n in counts.items():
            statuses[status] = statuses.get(status, 0) + n
    return WrkResult(
        connections=connections,
        seconds=round(duration_s, 3),
        requests=raw["requests"],
        qps=raw["requests"] / duration_s if duration_s else 0.0,
        ok_qps=(raw["requests"] - raw["status"]) / duration_s if duration_s else 0.0,
        p50_ms=raw["p50_us"] / 1e3,
        p90_ms=raw["p90_us"] / 1e3,
        p99_ms=raw["p99_us"] / 1e3,
        mean_ms=raw["mean_us"] / 1e3,
        errors={key: raw[key] for key in ERROR_KINDS},
        client_cpu_percent=100.0 * cpu / wall if wall else 0.0,
        statuses=dict(sorted(statuses.items())),
    )
