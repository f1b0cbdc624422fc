"""Soak: a mixed load at 70% of the service's capacity for half an hour, with writes alongside
that replace documents, and the Redis embedding cache on.

    python -m benchmarks soak --index-dir runs/http-load                 # about 32 minutes
    python -m benchmarks soak --index-dir runs/http-load --minutes 60    # an hour
    python -m benchmarks soak --smoke --bundle B --out DIR               # seconds

The service (:func:`benchmarks.harness.live_load.served_corpus`: the HTTP load test's corpus and
index settings, so ``--index-dir`` can reuse its folder; snapshots every
``snapshot_interval_s``) first has its capacity measured for each workload of the mix (closed
loop, ``wrk`` at ``capacity_connections`` for ``capacity_seconds``: coarse, fine and C2F
``GET /search``, ``POST /embed`` of one text); the mix's capacity is then ``1 / Σ share /
capacity``. The soak offers ``load_fraction`` of it, open loop, for ``minutes`` minutes: every
minute one ``hey`` process per workload at its share of the rate (:mod:`benchmarks.harness.hey`;
each minute's requests carry the next query text), so that p50 and p99 come out minute by
minute. Meanwhile a thread posts ``ingest_rate`` documents a second (``POST /documents``, one
batch a second; a refusal is an error, not retried): with ``replace`` (the default) each replaces
a document of the corpus with another of the corpus's texts, in turn, so that the corpus keeps its
size; otherwise they are new documents. With ``redis`` (the default) a ``redis-server`` is
started for the run and the service caches query embeddings in it.

Per minute: answers by status, requests without an answer, ingest errors, p50 and p99 of every
answered request and of each workload, and the service's resident memory (``VmRSS``) at the
minute's end; the documents stored and the periodic snapshots written in the minute, how many
and their seconds in all (the service's ``fractal_documents`` and
``fractal_snapshot_duration_seconds``). The targets compare the end of the first
``warmup_minutes`` with the end of the run (RSS), and the p99 of every answer of the first
``warmup_minutes`` minutes with that of the last as many. Without ``replace`` the index grows by
``ingest_rate`` documents a second, and the report gives the bytes per document added.

Writes ``soak[_TAG][_smoke].{json,md,png}`` under ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import numpy as np
from matplotlib.figure import Figure

from benchmarks.harness.hey import MS, HeyResult, start_hey, workers_for
from benchmarks.harness.live_load import (
    WORKLOADS,
    ServedSettings,
    corpus,
    corpus_id,
    served_corpus,
    workload_request,
    workload_requests,
)
from benchmarks.harness.markdown import bullet_list, markdown_table, targets_table
from benchmarks.harness.metrics import Samples, metric, metric_samples, metric_total
from benchmarks.harness.process_memory import status_bytes
from benchmarks.harness.processes import RedisServer
from benchmarks.harness.runner import Progress, option, yes_no
from benchmarks.harness.wrk import run_wrk

MIB = 2**20
MIX = {"coarse": 0.4, "fine": 0.2, "c2f": 0.2, "embed": 0.2}
"""Each workload's share of the soak's requests."""


@dataclass(frozen=True)
class Settings(ServedSettings):
    """Every parameter of a run: the corpus and the service (:class:`ServedSettings`), then
    these."""

    minutes: int = option(30, "minutes of soak")
    warmup_minutes: int = option(5, "minutes after which RSS is compared; and the p99 window")
    minute_seconds: float = 60.0
    """Seconds of one "minute" (the smoke run shortens it)."""
    load_fraction: float = option(0.7, "offered load as a fraction of the mix's capacity")
    capacity_connections: int = 32
    capacity_seconds: float = option(10.0, "seconds of each workload's capacity run")
    ingest_rate: float = option(100.0, "documents a second posted during the soak")
    replace: bool = option(
        True, "writes replace corpus documents (else they add new ones): yes or no", parse=yes_no
    )
    redis: bool = option(True, "serve with a Redis query-embedding cache: yes or no", parse=yes_no)
    snapshot_interval_s: float = option(60.0, "the service's snapshot interval during the soak")
    per_worker_rate: float = 20.0
    """Requests a second of one hey worker (workers = rate / this): hey's workers tick
    together, so fewer workers make smaller bursts; at 70% of capacity each answer comes well
    within the 50 ms a worker has."""
    timeout_s: float = 10.0
    target_rss_growth: float = 0.05
    target_p99_drift: float = 0.2
    tag: str = option("", "added to the result file names")


SMOKE = Settings(
    documents=300,
    queries=60,
    minutes=2,
    warmup_minutes=1,
    minute_seconds=3.0,
    capacity_seconds=1.0,
    ingest_rate=20.0,
    snapshot_interval_s=2.0,
)


def results_name(settings: Settings) -> str:
    return "soak" + (f"_{settings.tag}" if settings.tag else "")


class Ingest(threading.Thread):
    """Posts ``rate`` documents once a second until stopped: with ``replace``, the corpus's own
    ids (``doc-0000000``…, in turn) with the next text of the corpus, else new ids. Counts what
    it posted and the batches refused or lost, per minute of the soak (``minute`` is set by the
    soak)."""

    def __init__(self, base_url: str, texts: Sequence[str], rate: float, replace: bool) -> None:
        super().__init__(daemon=True)
        self.base_url, self.texts, self.batch = base_url, texts, max(1, round(rate))
        self.replace = replace
        self.stopped = threading.Event()
        self.minute = 0
        self.posted: dict[int, int] = {}
        self.errors: dict[int, int] = {}

    def run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=60) as client:
            sent = 0
            while not self.stopped.is_set():
                started = time.perf_counter()
                documents = [self._document(sent + i) for i in range(self.batch)]
                minute = self.minute
                try:
                    ok = client.post("/documents", json={"documents": documents}).is_success
                except httpx.HTTPError:
                    ok = False
                if ok:
                    self.posted[minute] = self.posted.get(minute, 0) + len(documents)
                else:
                    self.errors[minute] = self.errors.get(minute, 0) + 1
                sent += len(documents)
                self.stopped.wait(max(0.0, 1.0 - (time.perf_counter() - started)))

    def _document(self, number: int) -> dict:
        size = len(self.texts)
        if self.replace:
            return {"id": corpus_id(number % size), "text": self.texts[(number + 1) % size]}
        return {"id": f"soak-{number:08d}", "text": self.texts[number % size]}


def capacities(base_url: str, queries: list[str], settings: Settings, progress: Progress) -> dict:
    """Each workload's answers below 400 a second, closed loop at ``capacity_connections``."""
    found = {}
    for workload in WORKLOADS:
        requests = workload_requests(workload, queries, settings.k)
        result = run_wrk(
            base_url,
            requests,
            settings.capacity_connections,
            settings.capacity_seconds,
            cpus=settings.generator_cpus,
        )
        found[workload.name] = result.ok_qps
        progress(f"{workload.name}: capacity {result.ok_qps:.1f}/s (p99 {result.p99_ms:.1f} ms)")
    return found


def percentiles(latency_s: np.ndarray) -> dict[str, float | None]:
    ms = latency_s * MS
    if not len(ms):
        return {"p50_ms": None, "p99_ms": None}
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99))}


def minute_row(
    minute: int, results: dict[str, HeyResult], latencies: dict[str, np.ndarray]
) -> dict:
    """One minute: per workload and for all, answers by status, errors and p50/p99."""
    per_workload = {
        name: {
            "statuses": {status: a.count for status, a in result.answered.items()},
            "transport_errors": result.transport_errors,
            "errors": result.requests - result.count("2"),
            "rate_sent": result.requests / result.seconds,
            "client_cpu_percent": result.client_cpu_percent,
            **percentiles(latencies[name]),
        }
        for name, result in results.items()
    }
    return {
        "minute": minute,
        "requests": sum(result.requests for result in results.values()),
        "errors": sum(entry["errors"] for entry in per_workload.values()),
        **percentiles(np.concatenate(list(latencies.values()))),
        "workloads": per_workload,
    }


def soak(
    base_url: str,
    pid: int,
    queries: list[str],
    rate: float,
    ingest: Ingest,
    settings: Settings,
    progress: Progress,
) -> tuple[list[dict], list[np.ndarray]]:
    """Every minute of the soak (one hey per workload at its share of ``rate``), and the
    latencies of every answer of each minute."""
    workloads = {workload.name: workload for workload in WORKLOADS}
    rows = []
    answered: list[np.ndarray] = []
    scraper = httpx.Client(base_url=base_url, timeout=30)
    before = metric_samples(scraper)
    for minute in range(settings.minutes):
        ingest.minute = minute
        query = queries[minute % len(queries)]
        runs = {}
        for name, share in MIX.items():
            runs[name] = start_hey(
                base_url,
                workload_request(workloads[name], query, settings.k),
                rate * share,
                settings.minute_seconds,
                workers_for(rate * share, settings.per_worker_rate),
                settings.timeout_s,
                settings.generator_cpus,
            )
        results = {name: run.result() for name, run in runs.items()}
        latencies = {name: run.rows.latency_s for name, run in runs.items() if run.rows}
        row = minute_row(minute, results, latencies)
        answered.append(np.concatenate([np.zeros(0), *latencies.values()]))
        row["rss_bytes"] = status_bytes(pid)
        after = metric_samples(scraper)
        row.update(snapshot_row(before, after))
        before = after
        rows.append(row)
        progress(
            f"minute {minute + 1}/{settings.minutes}: {row['requests']} requests, "
            f"{row['errors']} errors, p50 {row['p50_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms, "
            f"RSS {row['rss_bytes'] / MIB:,.0f} MiB"
        )
    scraper.close()
    return rows, answered


def snapshot_row(before: Samples, after: Samples) -> dict:
    """Documents stored at the minute's end, and the periodic snapshots written during it
    (the service's ``fractal_snapshot_duration_seconds``): how many, and their seconds in all."""
    name = "fractal_snapshot_duration_seconds"
    return {
        "documents": int(metric_total(after, "fractal_documents")),
        "snapshots": int(metric(after, f"{name}_count") - metric(before, f"{name}_count")),
        "snapshot_seconds": metric(after, f"{name}_sum") - metric(before, f"{name}_sum"),
    }


def windows(answered: list[np.ndarray], settings: Settings) -> dict[str, float | None]:
    """The p99 of every answer of the first ``warmup_minutes`` minutes, and of the last as many."""
    span = min(settings.warmup_minutes, len(answered))
    return {
        "first_p99_ms": percentiles(np.concatenate(answered[:span]))["p99_ms"],
        "last_p99_ms": percentiles(np.concatenate(answered[-span:]))["p99_ms"],
        "minutes": span,
    }


def targets(rows: list[dict], ingest_errors: int, tails: dict, settings: Settings) -> list[dict]:
    """No errors; RSS at the end close to RSS after the warm-up; the last minutes' p99 close to
    the first minutes'."""
    first, last = rows[min(settings.warmup_minutes, len(rows)) - 1], rows[-1]
    errors = sum(row["errors"] for row in rows) + ingest_errors
    growth = last["rss_bytes"] / first["rss_bytes"] - 1
    early, late = tails["first_p99_ms"], tails["last_p99_ms"]
    drift = late / early - 1
    span = tails["minutes"]
    return [
        {
            "target": "0 errors (non-2xx answers, requests without an answer, ingest refusals)",
            "reached": errors,
            "met": errors == 0,
        },
        {
            "target": f"RSS growth from the end of minute {first['minute'] + 1} to the end < "
            f"{settings.target_rss_growth:.0%}",
            "reached": f"{growth:.1%} ({_per_document(first, last)})",
            "met": growth < settings.target_rss_growth,
        },
        {
            "target": f"p99 of the last {span} minutes within {settings.target_p99_drift:.0%} "
            f"of the first {span}",
            "reached": f"{late:.1f} ms vs {early:.1f} ms ({drift:+.0%})",
            "met": drift <= settings.target_p99_drift,
        },
    ]


def _per_document(first: dict, last: dict) -> str:
    """RSS added per document stored between the first minute's end and the last's."""
    added = last["documents"] - first["documents"]
    if added <= 0:
        return f"{last['documents']:,} documents at both"
    grown = last["rss_bytes"] - first["rss_bytes"]
    return f"{grown / added:,.0f} bytes per document added, {added:,} added"


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def markdown(report: dict) -> str:
    settings = report["settings"]
    minutes = [
        [
            row["minute"] + 1,
            row["requests"],
            row["errors"],
            report["ingest"]["errors_by_minute"].get(str(row["minute"]), 0),
            report["ingest"]["posted_by_minute"].get(str(row["minute"]), 0),
            _ms(row["p50_ms"]),
            _ms(row["p99_ms"]),
            *(_ms(row["workloads"][name]["p99_ms"]) for name in MIX),
            f"{row['documents']:,}",
            row["snapshots"],
            f"{row['snapshot_seconds']:.2f}",
            f"{row['rss_bytes'] / MIB:,.0f}",
        ]
        for row in report["minutes"]
    ]
    capacity = [
        [name, f"{qps:.1f}", f"{MIX[name]:.0%}"] for name, qps in report["capacity"].items()
    ]
    return "\n\n".join(
        [
            "# Soak" + (" (smoke run)" if report["smoke"] else ""),
            f"Command: `{report['command']}`. {report['corpus']['documents']:,} documents; "
            f"{settings['load_fraction']:.0%} of the mix's capacity "
            f"({report['mix_capacity']:.1f}/s) offered, i.e. {report['rate']:.1f} requests/s, "
            f"with {settings['ingest_rate']:g} documents/s "
            f"{'replaced' if settings['replace'] else 'added'}, "
            f'the Redis cache {"on" if settings["redis"] else "off"}; one "minute" is '
            f"{settings['minute_seconds']:g} s. Service settings beyond its defaults: "
            f"`{report['service']}`.",
            "## Targets\n\n" + targets_table(report["targets"]),
            "## Capacity (closed loop, wrk) and mix\n\n"
            + markdown_table(["workload", "capacity /s", "share of the soak"], capacity),
            "## Minute by minute\n\nErrors: answers other than 2xx and requests without an "
            "answer; latency of answered requests (hey's); RSS: the service's `VmRSS` at the "
            "minute's end; documents stored at the minute's end and the periodic snapshots written "
            "during it (how many, their seconds in all), from the service's `/metrics`.\n\n"
            + markdown_table(
                [
                    "minute",
                    "requests",
                    "errors",
                    "ingest errors",
                    "documents ingested",
                    "p50 ms",
                    "p99 ms",
                    *(f"{name} p99 ms" for name in MIX),
                    "documents stored",
                    "snapshots",
                    "snapshot s",
                    "RSS MiB",
                ],
                minutes,
            ),
            "## Settings\n\n" + bullet_list(settings),
            "## Machine\n\n" + bullet_list(report["machine"]),
        ]
    )


def plot(report: dict, path: Path) -> None:
    figure = Figure(figsize=(11, 4))
    left, right = figure.subplots(1, 2)
    rows = report["minutes"]
    x = [row["minute"] + 1 for row in rows]
    left.plot(x, [row["p99_ms"] for row in rows], "-o", label="all p99")
    for name in MIX:
        values = [row["workloads"][name]["p99_ms"] or np.nan for row in rows]
        left.plot(x, values, "--", label=f"{name} p99")
    right.plot(x, [row["rss_bytes"] / MIB for row in rows], "-o")
    left.set_ylabel("p99 latency (ms)")
    left.set_title("Tail latency, minute by minute")
    right.set_ylabel("service VmRSS (MiB)")
    right.set_title("Service memory at each minute's end")
    for axis in (left, right):
        axis.set_xlabel("minute")
        axis.grid(alpha=0.3)
    left.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def run(settings: Settings, progress: Progress) -> dict:
    texts, sources, queries, description = corpus(settings)
    service: dict[str, object] = {
        "index_kinds": "hnsw,exact",
        "snapshot_interval_s": settings.snapshot_interval_s,
    }
    with tempfile.TemporaryDirectory() as work, ExitStack() as stack:
        if settings.redis:
            redis_server = RedisServer(Path(work))
            redis_server.start()
            stack.callback(redis_server.stop)
            service["redis_url"] = redis_server.url
        with served_corpus(settings, texts, sources, Path(work), progress, **service) as process:
            base_url = process.base_url
            capacity = capacities(base_url, queries, settings, progress)
            mix_capacity = 1.0 / sum(share / capacity[name] for name, share in MIX.items())
            rate = settings.load_fraction * mix_capacity
            progress(f"soak at {rate:.1f} requests/s for {settings.minutes} minutes")
            ingest = Ingest(base_url, texts, settings.ingest_rate, settings.replace)
            ingest.start()
            try:
                rows, answered = soak(
                    base_url, process.process.pid, queries, rate, ingest, settings, progress
                )
            finally:
                ingest.stopped.set()
                ingest.join()
    ingest_errors = sum(ingest.errors.values())
    tails = windows(answered, settings)
    return {
        "settings": asdict(settings),
        "corpus": description,
        "service": {
            key: "(a redis-server started for the run)" if key == "redis_url" else value
            for key, value in (service | dict(settings.service)).items()
        },
        "capacity": capacity,
        "mix_capacity": mix_capacity,
        "rate": rate,
        "ingest": {
            "posted_by_minute": {str(m): n for m, n in ingest.posted.items()},
            "errors_by_minute": {str(m): n for m, n in ingest.errors.items()},
        },
        "minutes": rows,
        "tails": tails,
        "targets": targets(rows, ingest_errors, tails, settings),
    }
