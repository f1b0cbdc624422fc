"""Issue 5's cache targets, measured on a live service and a real ``redis-server`` over HTTP.

    python -m benchmarks.cache_load --bundle runs/clinc150-d5/bundle
    python -m benchmarks.cache_load --bundle B --smoke --out /tmp/cl     # tiny, for CI

Starts ``redis-server`` and ``python -m service`` (cache on) on free loopback ports, takes
distinct CLINC-150 test utterances as queries and sends them as ``POST /embed`` (one text,
``dims=64``) from ``--workers`` concurrent clients:

1. **cold**: every query once (cache misses: encoder + Redis write);
2. **warm**: every query ``--repeats`` more times (hits), with the cache hit rate and the texts
   the encoder ran during the phase read from ``/metrics``;
3. **outage**: ``3 ×`` the queries again, ``kill -9`` of Redis after a third of them; failed
   requests are counted; then Redis is restarted on its port and requests continue until the
   cache serves a hit again (the seconds and requests that took).

Latencies are client-side per request (p50/p95, ms) and phases are compared side by side in one
run. Writes ``cache_load[_smoke].{json,md}`` under ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.live_service import free_port, live_service
from benchmarks.reporting import (
    benchmark_parser,
    markdown_table,
    record_end_load,
    results_name,
    write_results,
)
from benchmarks.search_measure import machine_header
from training.data.registry import load_dataset

DIMS = 64
RESUME_LIMIT_S = 60.0
SMOKE_QUERIES = 20


class Redis:
    """A ``redis-server`` without persistence on a fixed loopback port."""

    def __init__(self, directory: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("error: redis-server is not installed (apt-get install redis-server)")
        self.command = [binary, "--port", str(free_port()), "--bind", "127.0.0.1", "--save", ""]
        self.command += ["--appendonly", "no", "--dir", str(directory)]
        self.url = f"redis://127.0.0.1:{self.command[2]}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(self.command, stdout=subprocess.DEVNULL)
        time.sleep(0.5)
        if self.process.poll() is not None:
            raise SystemExit(f"error: redis-server exited with status {self.process.returncode}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def counters(client: httpx.Client) -> dict[str, float]:
    """The cache and encoder counters of ``/metrics`` (cache lookups keyed by result)."""
    wanted = {
        "fractal_cache_lookups_total",
        "fractal_cache_errors_total",
        "fractal_encode_batch_size_sum",
        "fractal_encoder_calls_skipped_total",
    }
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name in wanted:
                label = sample.labels.get("result") or sample.labels.get("operation") or ""
                key = f"{sample.name}{'.' + label if label else ''}"
                values[key] = values.get(key, 0.0) + sample.value
    return values


def delta(before: dict[str, float], after: dict[str, float], key: str) -> float:
    return after.get(key, 0.0) - before.get(key, 0.0)


def run_phase(
    client: httpx.Client,
    texts: list[str],
    workers: int,
    on_done: Callable[[int], None] | None = None,
) -> dict:
    """Send ``texts`` (one request each) from ``workers`` threads; latencies and failures."""
    done = 0
    lock = threading.Lock()

    def one(text: str) -> tuple[float, int]:
        nonlocal done
        started = time.perf_counter()
        try:
            status = client.post("/embed", json={"texts": [text], "dims": DIMS}).status_code
        except httpx.TransportError:
            status = -1
        elapsed = time.perf_counter() - started
        with lock:
            done += 1
            if on_done is not None:
                on_done(done)
        return elapsed, status

    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        outcomes = list(pool.map(one, texts))
    wall = time.perf_counter() - started
    latencies = np.array([elapsed for elapsed, _ in outcomes]) * 1000
    return {
        "requests": len(texts),
        "failed": sum(status != 200 for _, status in outcomes),
        "throughput_rps": len(texts) / wall,
        "p50_ms": float(np.percentile(latencies, 50)),
        "p95_ms": float(np.percentile(latencies, 95)),
    }


def measure(bundle: Path, queries: int, repeats: int, workers: int) -> dict:
    machine = machine_header(threads=1)  # the service runs FAISS on one thread
    data = load_dataset("clinc150", max_test=queries * 2)
    texts = list(dict.fromkeys(data.test.texts))[:queries]
    with tempfile.TemporaryDirectory() as scratch:
        redis = Redis(Path(scratch))
        redis.start()
        try:
            with (
                live_service(
                    bundle,
                    Path(scratch) / "index",
                    Path(scratch) / "service.log",
                    redis_url=redis.url,
                    redis_retry_s=0.5,
                ) as base_url,
                httpx.Client(base_url=base_url, timeout=60) as client,
            ):
                phases = run_phases(client, redis, texts, repeats, workers)
        finally:
            redis.kill()
    record_end_load(machine)
    return {
        "bundle": str(bundle),
        "queries": len(texts),
        "repeats": repeats,
        "workers": workers,
        "dims": DIMS,
        "machine": machine,
        **phases,
    }


def run_phases(
    client: httpx.Client, redis: Redis, texts: list[str], repeats: int, workers: int
) -> dict:
    """The three phases of the module docstring against a running service and Redis."""
    start = counters(client)
    cold = run_phase(client, texts, workers)
    after_cold = counters(client)
    warm = run_phase(client, texts * repeats, workers)
    after_warm = counters(client)
    lookups = sum(
        delta(after_cold, after_warm, f"fractal_cache_lookups_total.{result}")
        for result in ("hit", "miss", "error")
    )
    warm |= {
        "hit_rate": delta(after_cold, after_warm, "fractal_cache_lookups_total.hit") / lookups,
        "texts_encoded": delta(after_cold, after_warm, "fractal_encode_batch_size_sum"),
        "encoder_calls_skipped": delta(
            after_cold, after_warm, "fractal_encoder_calls_skipped_total"
        ),
    }
    cold["texts_encoded"] = delta(start, after_cold, "fractal_encode_batch_size_sum")
    load = texts * 3
    kill_after = len(load) // 3
    outage = run_phase(
        client, load, workers, lambda done: redis.kill() if done == kill_after else None
    )
    after_outage = counters(client)
    outage |= {
        "redis_killed_after": kill_after,
        "redis_errors": sum(
            delta(after_warm, after_outage, f"fractal_cache_errors_total.{operation}")
            for operation in ("get", "set")
        ),
    }
    redis.start()
    restarted = time.perf_counter()
    sent, resumed = 0, False
    while not resumed and time.perf_counter() - restarted < RESUME_LIMIT_S:
        before = counters(client)
        client.post("/embed", json={"texts": [texts[0]], "dims": DIMS})
        sent += 1
        resumed = delta(before, counters(client), "fractal_cache_lookups_total.hit") > 0
    outage |= {
        "hits_resumed": resumed,
        "hits_resumed_after_s": time.perf_counter() - restarted,
        "requests_until_hit": sent,
    }
    return {"cold": cold, "warm": warm, "outage": outage}


def markdown(record: dict, smoke: bool) -> str:
    cold, warm, outage, machine = (
        record["cold"],
        record["warm"],
        record["outage"],
        record["machine"],
    )
    rows = [
        [
            name,
            phase["requests"],
            phase["failed"],
            f"{phase['throughput_rps']:.0f}",
            f"{phase['p50_ms']:.1f}",
            f"{phase['p95_ms']:.1f}",
        ]
        for name, phase in (
            ("cold (misses)", cold),
            ("warm (repeats)", warm),
            ("Redis killed mid-run", outage),
        )
    ]
    loads = [machine["load_average_1_5_15_min_at_start"], machine["load_average_1_5_15_min_at_end"]]
    return "\n".join(
        [
            f"# Redis embedding cache under load{' (smoke run)' if smoke else ''}",
            "",
            f"Bundle `{record['bundle']}`; {record['queries']} distinct CLINC-150 test utterances "
            f"as `POST /embed` (one text, dims={record['dims']}), {record['workers']} concurrent "
            f"clients, {record['repeats']} warm repeats; {machine['cpu_model']}, "
            f"{machine['cpu_cores']} cores, load average (1/5/15 min) {loads[0]} at the start, "
            f"{loads[1]} at the end.",
            "",
            markdown_table(["phase", "requests", "failed", "req/s", "p50 ms", "p95 ms"], rows),
            "",
            f"- warm hit rate **{warm['hit_rate']:.2%}** (target ≥ 99%); texts encoded during the "
            f"warm phase: {warm['texts_encoded']:.0f} (cold phase: {cold['texts_encoded']:.0f}); "
            f"requests answered without the encoder: {warm['encoder_calls_skipped']:.0f}",
            f"- warm vs cold: p50 {cold['p50_ms'] / warm['p50_ms']:.1f}× lower, throughput "
            f"{warm['throughput_rps'] / cold['throughput_rps']:.1f}× higher",
            f"- Redis `kill -9` after {outage['redis_killed_after']} of {outage['requests']} "
            f"requests: **{outage['failed']} failed** (target 0); {outage['redis_errors']:.0f} "
            "Redis errors counted",
            f"- after Redis restarted on its port: hits resumed = {outage['hits_resumed']}, "
            f"{outage['hits_resumed_after_s']:.2f} s and {outage['requests_until_hit']} requests "
            "later (the first request stores the entry, the next one hits)",
        ]
    )


def run(bundle: Path, queries: int, repeats: int, workers: int, out: Path, smoke: bool) -> dict:
    """Measure, write ``cache_load[_smoke].{json,md}`` under ``out``, return the record."""
    record = measure(bundle, queries, repeats, workers) | {"smoke": smoke}
    write_results(out, results_name("cache_load", smoke), record, markdown(record, smoke))
    return record


def main() -> None:
    parser = benchmark_parser(__doc__, f"{SMOKE_QUERIES} queries, 2 repeats")
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    queries, repeats = (SMOKE_QUERIES, 2) if args.smoke else (args.queries, args.repeats)
    record = run(args.bundle, queries, repeats, args.workers, args.out, args.smoke)
    if not args.quiet:
        print(markdown(record, args.smoke))


if __name__ == "__main__":
    main()
