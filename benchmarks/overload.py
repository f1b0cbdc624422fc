"""Overload: the live service offered 1×, 2× and 3× its capacity on ``/embed`` and ``/search``.

    python -m benchmarks overload --index-dir runs/http-load                # about 12 minutes
    python -m benchmarks overload --index-dir runs/http-load \\
        --service queue_deadline_ms=200,limit_concurrency=256               # settings passed on
    python -m benchmarks overload --smoke --bundle B --out DIR              # seconds

The service (:func:`benchmarks.harness.live_load.served_corpus`: the HTTP load test's corpus and
index settings, so ``--index-dir`` can reuse its folder) is measured on two endpoints, one after
the other: ``POST /embed`` with ``embed_texts`` query texts a request, and a coarse ``GET
/search`` (one query, HNSW at the coarse prefix). For each:

1. **capacity**: closed loop, ``wrk`` at ``capacity_connections`` connections for
   ``capacity_seconds`` (:func:`benchmarks.harness.wrk.run_wrk`, statuses counted); capacity is
   its answers below 400 a second;
2. **unloaded**: ``hey`` at ``baseline_rate`` requests a second from one worker, for the
   latency of a request on an idle service; and ``probes`` single requests one after the other
   from this process (httpx), the yardstick of recovery;
3. **steps**: ``hey`` offering ``multiple × capacity`` requests a second for ``step_seconds``
   (:mod:`benchmarks.harness.hey`; one worker per ``per_worker_rate`` requests a second, each
   request timed out after ``timeout_s``), for every multiple. Each answer is counted by status
   with its latency: accepted (2xx), shed (429), past its deadline (504), other 5xx; requests
   that got no answer (timeouts, resets) are counted apart. The service's resident memory
   (``VmRSS``) is read every second of the step. When the step ends, single requests are sent
   one after the other until ``recovery_probes`` in a row answer within ``recovery_factor`` ×
   the unloaded probes' median: the **recovery time** is from the last request hey sent to the
   first of them (none within ``recovery_limit_s``: not recovered). hey returns once every
   request it sent is answered or timed out, so a backlog the service still works through
   counts in the recovery time.

Two more measurements follow:

- **storm**: ``wrk`` with ``storm_connections`` connections, each sending ``POST /embed`` with
  ``storm_texts`` texts back to back for ``storm_seconds`` (wrk's timeout ``timeout_s``): answers
  by status and wrk's socket errors (timeouts, resets);
- **ingest flood**: coarse ``GET /search`` offered at ``flood_search_fraction`` of its capacity
  for ``step_seconds``, alone and then while ``flood_clients`` clients post ``flood_batch``
  documents a request to ``POST /documents`` back to back (each replacing a corpus document with
  another of its texts, so that the corpus keeps its size). The encoder queue serves queries
  before bulk texts; the accepted searches' p99 with the flood beside the one without shows what
  ingest costs a query.

While a service neither sheds nor answers within ``workers / rate`` seconds, hey's workers wait
for their answers and the rate actually sent falls below the rate asked (the step then lasts
longer than ``step_seconds``): both are reported.

hey's workers tick together, so the offered load comes in bursts (see
:mod:`benchmarks.harness.hey`); every request of one endpoint carries the same text(s). The
service gets its defaults plus ``--service key=value,…`` (each ``FRACTAL_KEY``): an admission
control's settings are passed that way. ``--pin yes`` runs the service on one core and the load
generators on the other.

Writes ``overload[_TAG][_smoke].{json,md,png}`` under ``--out`` (default
``benchmarks/results``).
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
from matplotlib.figure import Figure

from benchmarks.harness.hey import HeyResult, run_hey, workers_for
from benchmarks.harness.live_load import (
    WORKLOADS,
    ServedSettings,
    corpus,
    corpus_id,
    served_corpus,
    workload_requests,
)
from benchmarks.harness.markdown import bullet_list, markdown_table, targets_table
from benchmarks.harness.process_memory import RssSampler
from benchmarks.harness.runner import Progress, option
from benchmarks.harness.wrk import HttpRequest, run_wrk

MIB = 2**20
SERVICE = {"index_kinds": "hnsw,exact", "snapshot_interval_s": 0}
"""The HTTP load test's index settings, so that its ``--index-dir`` is reused as it is."""


@dataclass(frozen=True)
class Settings(ServedSettings):
    """Every parameter of a run: the corpus and the service (:class:`ServedSettings`), then
    these."""

    embed_texts: int = option(8, "texts per POST /embed request")
    capacity_connections: int = 32
    capacity_seconds: float = option(15.0, "seconds of the closed-loop capacity run")
    baseline_rate: float = 10.0
    """Requests a second of the unloaded latency run (one worker)."""
    baseline_seconds: float = 10.0
    probes: int = 30
    """Single requests, one after the other, that measure the unloaded probe latency."""
    multiples: tuple[int, ...] = option((1, 2, 3), "offered load in multiples of capacity")
    step_seconds: float = option(90.0, "seconds of each overload step")
    per_worker_rate: float = 5.0
    """Requests a second of one hey worker (workers = rate / this)."""
    timeout_s: float = 10.0
    """A request without an answer after this long is a timeout."""
    recovery_factor: float = 1.5
    recovery_probes: int = 3
    recovery_limit_s: float = 60.0
    rss_settle_s: float = 60.0
    """RSS may grow during the first seconds of a step, not after."""
    storm_connections: int = option(512, "connections of the storm")
    storm_texts: int = option(32, "texts per POST /embed request of the storm")
    storm_seconds: float = option(30.0, "seconds of the storm")
    flood_search_fraction: float = 0.5
    flood_clients: int = 2
    flood_batch: int = 64
    target_shed_p99_ms: float = 100.0
    target_flood_p99_factor: float = 2.0
    target_accepted_p99_factor: float = 4.0
    target_rss_growth: float = 0.05
    tag: str = option("", "added to the result file names")


SMOKE = Settings(
    documents=300,
    queries=60,
    embed_texts=4,
    capacity_seconds=1.0,
    baseline_rate=20.0,
    baseline_seconds=1.0,
    probes=5,
    multiples=(1, 3),
    step_seconds=2.0,
    recovery_limit_s=5.0,
    rss_settle_s=1.0,
    storm_connections=64,
    storm_texts=8,
    storm_seconds=2.0,
    flood_batch=16,
)


def results_name(settings: Settings) -> str:
    return "overload" + (f"_{settings.tag}" if settings.tag else "")


def endpoint_requests(queries: list[str], settings: Settings) -> dict[str, list[HttpRequest]]:
    """Per endpoint, the requests its capacity run cycles through; the first is the one the
    rate-limited steps send."""
    size = settings.embed_texts
    coarse = next(workload for workload in WORKLOADS if workload.name == "coarse")
    return {
        "embed": [
            HttpRequest.post_json("/embed", {"texts": queries[start : start + size]})
            for start in range(0, len(queries) - size + 1, size)
        ],
        "search": workload_requests(coarse, queries, settings.k),
    }


# -- measuring ---------------------------------------------------------------------------------


def probe_ms(client: httpx.Client, request: HttpRequest) -> float:
    """One request's latency (ms); an answer other than 200 raises."""
    started = time.perf_counter()
    response = client.request(
        request.method, request.path, content=request.body, headers=request.headers
    )
    elapsed = (time.perf_counter() - started) * 1e3
    response.raise_for_status()
    return elapsed


def recovery_seconds(
    client: httpx.Client,
    request: HttpRequest,
    baseline_ms: float,
    load_ended: float,
    settings: Settings,
) -> float | None:
    """Seconds from ``load_ended`` (a ``perf_counter`` time) until the first of
    ``recovery_probes`` single requests in a row each answered within ``recovery_factor ×
    baseline_ms`` was sent; None if that did not happen within ``recovery_limit_s`` of it."""
    limit = settings.recovery_factor * baseline_ms
    started = load_ended
    streak, streak_started = 0, 0.0
    while time.perf_counter() - started < settings.recovery_limit_s:
        sent = time.perf_counter() - started
        try:
            fast = probe_ms(client, request) <= limit
        except httpx.HTTPError:
            fast = False
        if not fast:
            streak = 0
            continue
        if streak == 0:
            streak_started = sent
        streak += 1
        if streak >= settings.recovery_probes:
            return streak_started
    return None


def step_row(result: HeyResult, samples: list[tuple[float, int]], settings: Settings) -> dict:
    """A step's outcomes by kind, its latencies by status, and the service's RSS."""
    after = [rss for at, rss in samples if at >= settings.rss_settle_s]
    settled = after[0] if after else None
    return {
        **result.to_json(),
        "accepted": result.count("2"),
        "shed_429": result.count("429"),
        "deadline_504": result.count("504"),
        "server_errors_5xx": result.count("5") - result.count("504"),
        "other_4xx": result.count("4") - result.count("429"),
        "offered_rate": result.requests / result.seconds,
        "rss_samples": samples,
        "rss_max_bytes": max(rss for _, rss in samples),
        "rss_growth_after_settle": (max(after) - settled) / settled if settled else None,
    }


def offered(base_url: str, request: HttpRequest, rate: float, settings: Settings) -> HeyResult:
    """hey sending ``request`` at ``rate`` a second for ``step_seconds`` (one worker per
    ``per_worker_rate``)."""
    return run_hey(
        base_url,
        request,
        rate,
        settings.step_seconds,
        workers_for(rate, settings.per_worker_rate),
        settings.timeout_s,
        settings.generator_cpus,
    )


def measure_endpoint(
    base_url: str,
    pid: int,
    name: str,
    requests: list[HttpRequest],
    settings: Settings,
    progress: Progress,
) -> dict:
    """Capacity, unloaded latency, and every step with its recovery, for one endpoint."""
    cpus = settings.generator_cpus
    capacity = run_wrk(
        base_url,
        requests,
        settings.capacity_connections,
        settings.capacity_seconds,
        count_statuses=True,
        cpus=cpus,
    )
    progress(
        f"{name}: capacity {capacity.ok_qps:.1f}/s at c={settings.capacity_connections} "
        f"(p99 {capacity.p99_ms:.1f} ms, statuses {capacity.statuses})"
    )
    request = requests[0]
    baseline = run_hey(
        base_url,
        request,
        settings.baseline_rate,
        settings.baseline_seconds,
        1,
        settings.timeout_s,
        cpus,
    )
    with httpx.Client(base_url=base_url, timeout=settings.timeout_s) as client:
        probe_baseline = statistics.median(
            probe_ms(client, request) for _ in range(settings.probes)
        )
        steps = []
        for multiple in settings.multiples:
            rate = multiple * capacity.ok_qps
            workers = workers_for(rate, settings.per_worker_rate)
            with RssSampler(pid) as sampler:
                started = time.perf_counter()
                result = offered(base_url, request, rate, settings)
            row = {"multiple": multiple, **step_row(result, sampler.samples, settings)}
            # The load ended with the last request hey sent; it returns once every request
            # sent is answered, so recovery includes draining the service's backlog.
            ended = started + result.last_sent_s
            row["recovery_seconds"] = recovery_seconds(
                client, request, probe_baseline, ended, settings
            )
            steps.append(row)
            progress(
                f"{name} ×{multiple}: {rate:.0f}/s offered by {workers} workers; "
                f"{row['accepted']} accepted, {row['shed_429']} shed, {row['deadline_504']} "
                f"504, {row['transport_errors']} without answer; recovered in "
                f"{row['recovery_seconds']} s"
            )
    return {
        "capacity": capacity.to_json(),
        "unloaded": baseline.to_json(),
        "probe_baseline_ms": probe_baseline,
        "steps": steps,
    }


def storm(base_url: str, queries: list[str], settings: Settings, progress: Progress) -> dict:
    """wrk at ``storm_connections`` sending ``storm_texts`` texts a request (see the module
    docstring): its answers by status and its socket errors."""
    size = settings.storm_texts
    requests = [
        HttpRequest.post_json("/embed", {"texts": (queries * size)[start : start + size]})
        for start in range(0, len(queries), size)
    ]
    result = run_wrk(
        base_url,
        requests,
        settings.storm_connections,
        settings.storm_seconds,
        timeout_s=settings.timeout_s,
        count_statuses=True,
        cpus=settings.generator_cpus,
    )
    progress(
        f"storm: c={settings.storm_connections}, {size} texts a request: statuses "
        f"{result.statuses}, socket errors {result.errors}"
    )
    return result.to_json()


class Flood(threading.Thread):
    """One client posting ``batch`` corpus documents a request, back to back, until stopped
    (each replaces the document of its id with the next text of the corpus); counts the
    documents stored and the answers by status."""

    def __init__(self, base_url: str, texts: list[str], batch: int, first: int) -> None:
        super().__init__(daemon=True)
        self.base_url, self.texts, self.batch, self.next = base_url, texts, batch, first
        self.stopped = threading.Event()
        self.stored = 0
        self.statuses: dict[str, int] = {}

    def run(self) -> None:
        size = len(self.texts)
        with httpx.Client(base_url=self.base_url, timeout=60) as client:
            while not self.stopped.is_set():
                documents = [
                    {"id": corpus_id(n % size), "text": self.texts[(n + 1) % size]}
                    for n in range(self.next, self.next + self.batch)
                ]
                self.next += self.batch
                try:
                    answer = client.post("/documents", json={"documents": documents})
                    status = str(answer.status_code)
                except httpx.HTTPError:
                    status = "no answer"
                self.statuses[status] = self.statuses.get(status, 0) + 1
                self.stored += len(documents) if status == "200" else 0


def ingest_flood(
    base_url: str,
    texts: list[str],
    request: HttpRequest,
    capacity: float,
    settings: Settings,
    progress: Progress,
) -> dict:
    """Coarse searches at ``flood_search_fraction`` of capacity, alone and beside the flood."""
    rate = settings.flood_search_fraction * capacity
    alone = offered(base_url, request, rate, settings)
    clients = [
        Flood(base_url, texts, settings.flood_batch, number * len(texts) // settings.flood_clients)
        for number in range(settings.flood_clients)
    ]
    for client in clients:
        client.start()
    started = time.perf_counter()
    flooded = offered(base_url, request, rate, settings)
    seconds = time.perf_counter() - started
    for client in clients:
        client.stopped.set()
    for client in clients:
        client.join()
    statuses: dict[str, int] = {}
    for client in clients:
        for status, count in client.statuses.items():
            statuses[status] = statuses.get(status, 0) + count
    stored = sum(client.stored for client in clients)
    found: dict = {
        "search_rate": rate,
        "alone": alone.to_json(),
        "flooded": flooded.to_json(),
        "ingest_documents_per_s": stored / seconds,
        "ingest_statuses": statuses,
    }
    progress(
        f"ingest flood: search p99 {_ms(latency(found['alone'], '200'))} ms alone, "
        f"{_ms(latency(found['flooded'], '200'))} ms beside {stored / seconds:.0f} documents/s "
        f"stored (ingest answers {statuses})"
    )
    return found


# -- reading the results -----------------------------------------------------------------------


def latency(run: dict, status: str, key: str = "p99_ms") -> float | None:
    """A latency percentile of a hey run's answers of ``status`` (None: there were none)."""
    answered = run["answered"].get(status)
    return None if answered is None else answered[key]


def targets(endpoints: dict, settings: Settings) -> list[dict]:
    """At the highest multiple, per endpoint: 429s fast, accepted requests not much slower
    than unloaded, nothing lost, no 5xx but 504, RSS flat after it settled."""
    found = []
    top = max(settings.multiples)
    for name, measured in endpoints.items():
        step = next(step for step in measured["steps"] if step["multiple"] == top)
        at = f"{name} at {top}× capacity"
        shed = latency(step, "429")
        unloaded = latency(measured["unloaded"], "200")
        accepted = latency(step, "200")
        limit = None if unloaded is None else settings.target_accepted_p99_factor * unloaded
        growth = step["rss_growth_after_settle"]
        found += [
            {
                "target": f"{at}: 429 answered with p99 ≤ {settings.target_shed_p99_ms:.0f} ms",
                "reached": "no 429" if shed is None else round(shed, 1),
                "met": shed is not None and shed <= settings.target_shed_p99_ms,
            },
            {
                "target": f"{at}: accepted p99 ≤ {settings.target_accepted_p99_factor:g}× "
                f"unloaded p99 ({_ms(unloaded)} ms)",
                "reached": "none accepted" if accepted is None else round(accepted, 1),
                "met": accepted is not None and limit is not None and accepted <= limit,
            },
            {
                "target": f"{at}: 0 timeouts and 0 connection resets",
                "reached": step["transport_errors"],
                "met": step["transport_errors"] == 0,
            },
            {
                "target": f"{at}: 0 5xx (504, past the deadline, counted apart)",
                "reached": step["server_errors_5xx"],
                "met": step["server_errors_5xx"] == 0,
            },
            {
                "target": f"{at}: RSS growth after the first {settings.rss_settle_s:g} s ≤ "
                f"{settings.target_rss_growth:.0%}",
                "reached": "step too short" if growth is None else f"{growth:.1%}",
                "met": growth is not None and growth <= settings.target_rss_growth,
            },
        ]
    return found


def extra_targets(storm_run: dict, flood: dict, settings: Settings) -> list[dict]:
    """The storm: no request without an answer. The flood: searches barely slower."""
    # wrk counts answers of status ≥ 400 as "status" errors: those were answered.
    lost = sum(count for kind, count in storm_run["errors"].items() if kind != "status")
    alone, flooded = latency(flood["alone"], "200"), latency(flood["flooded"], "200")
    factor = settings.target_flood_p99_factor
    return [
        {
            "target": f"storm (wrk -c{settings.storm_connections}, {settings.storm_texts} texts "
            "a request): 0 timeouts and 0 socket errors",
            "reached": lost,
            "met": lost == 0,
        },
        {
            "target": f"search p99 beside an ingest flood ≤ {factor:g}× its p99 alone "
            f"({_ms(alone)} ms)",
            "reached": "none accepted" if flooded is None else round(flooded, 1),
            "met": alone is not None and flooded is not None and flooded <= factor * alone,
        },
    ]


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def markdown(report: dict) -> str:
    settings = report["settings"]
    rows = []
    for name, measured in report["endpoints"].items():
        unloaded = measured["unloaded"]
        rows.append(
            [
                name,
                "unloaded",
                f"{unloaded['rate_asked']:.0f}",
                unloaded["requests"],
                _ms(latency(unloaded, "200", "p50_ms")),
                _ms(latency(unloaded, "200")),
                "–",
                "–",
                f"{unloaded['answered'].get('200', {}).get('count', 0)} / 0",
                "–",
                unloaded["transport_errors"],
                "–",
                "–",
                f"{unloaded['client_cpu_percent']:.0f}",
            ]
        )
        for step in measured["steps"]:
            rows.append(
                [
                    name,
                    f"{step['multiple']}×",
                    f"{step['rate_asked']:.0f} ({step['offered_rate']:.0f})",
                    step["requests"],
                    _ms(latency(step, "200", "p50_ms")),
                    _ms(latency(step, "200")),
                    _ms(latency(step, "429", "p50_ms")),
                    _ms(latency(step, "429")),
                    f"{step['accepted']} / {step['shed_429']}",
                    f"{step['deadline_504']} / {step['server_errors_5xx']}",
                    step["transport_errors"],
                    f"{step['rss_max_bytes'] / MIB:,.0f}",
                    _ms(step["recovery_seconds"]),
                    f"{step['client_cpu_percent']:.0f}",
                ]
            )
    capacities = [
        [
            name,
            f"{measured['capacity']['ok_qps']:.1f}",
            f"{measured['capacity']['p99_ms']:.1f}",
            measured["capacity"]["statuses"],
            f"{measured['probe_baseline_ms']:.1f}",
        ]
        for name, measured in report["endpoints"].items()
    ]
    return "\n\n".join(
        [
            "# Overload" + (" (smoke run)" if report["smoke"] else ""),
            f"Command: `{report['command']}`. {report['corpus']['documents']:,} documents; "
            f"`/embed` requests carry {settings['embed_texts']} texts, `/search` is coarse "
            "(HNSW, 64-d). Service settings beyond its defaults: "
            f"`{report['service']}`.",
            "## Targets\n\n" + targets_table(report["targets"]),
            "## Capacity (closed loop, wrk)\n\n"
            + markdown_table(
                [
                    "endpoint",
                    "capacity /s",
                    "p99 ms",
                    "statuses",
                    "unloaded probe ms (median)",
                ],
                capacities,
            ),
            "## Steps (hey, rate-limited)\n\nOffered: the rate asked (the rate sent: requests "
            "over the step's wall time). Latency of accepted (200) and shed (429) answers; "
            "`no answer`: timeouts and resets; `RSS`: the service's largest `VmRSS` in the step; "
            "`recovery`: seconds from the last request sent until single requests answer within "
            f"{settings['recovery_factor']}× the unloaded probe median.\n\n"
            + markdown_table(
                [
                    "endpoint",
                    "load",
                    "offered /s",
                    "requests",
                    "200 p50 ms",
                    "200 p99 ms",
                    "429 p50 ms",
                    "429 p99 ms",
                    "200 / 429",
                    "504 / other 5xx",
                    "no answer",
                    "RSS MiB",
                    "recovery s",
                    "hey CPU %",
                ],
                rows,
            ),
            *([storm_section(report), flood_section(report)] if "flood" in report else []),
            "## Settings\n\n" + bullet_list(settings),
            "## Machine\n\n" + bullet_list(report["machine"]),
        ]
    )


def storm_section(report: dict) -> str:
    storm_run, settings = report["storm"], report["settings"]
    return (
        f"## Storm (wrk, c={settings['storm_connections']}, {settings['storm_texts']} texts a "
        f"request, {settings['storm_seconds']:g} s)\n\n"
        f"{storm_run['requests']:,} answers: {storm_run['statuses']}; socket errors (timeouts, "
        f"resets): { {k: n for k, n in storm_run['errors'].items() if k != 'status'} }; "
        "answers below 400: "
        f"{storm_run['ok_qps']:.1f}/s, p99 {storm_run['p99_ms']:.1f} ms (wrk counts every answer "
        f"in its latency, 429s included); wrk CPU {storm_run['client_cpu_percent']:.0f}%."
    )


def flood_section(report: dict) -> str:
    flood, settings = report["flood"], report["settings"]
    rows = [
        [
            label,
            f"{run['rate_asked']:.0f}",
            run["requests"],
            _ms(latency(run, "200", "p50_ms")),
            _ms(latency(run, "200")),
            {status: answered["count"] for status, answered in run["answered"].items()},
            run["transport_errors"],
        ]
        for label, run in (("alone", flood["alone"]), ("beside the flood", flood["flooded"]))
    ]
    return (
        f"## Searches beside an ingest flood\n\nCoarse `GET /search` offered at "
        f"{settings['flood_search_fraction']:.0%} of its capacity, alone, then while "
        f"{settings['flood_clients']} clients post {settings['flood_batch']} documents a request "
        f"back to back: {flood['ingest_documents_per_s']:.0f} documents/s stored (ingest answers "
        f"{flood['ingest_statuses']}).\n\n"
        + markdown_table(
            ["searches", "offered /s", "requests", "200 p50 ms", "200 p99 ms", "statuses"]
            + ["no answer"],
            rows,
        )
    )


def plot(report: dict, path: Path) -> None:
    figure = Figure(figsize=(11, 4))
    left, right = figure.subplots(1, 2)
    for name, measured in report["endpoints"].items():
        steps = measured["steps"]
        x = [step["multiple"] for step in steps]
        for status, style in (("200", "-o"), ("429", "--s")):
            y = [latency(step, status) for step in steps]
            if any(value is not None for value in y):
                left.plot(x, [v or float("nan") for v in y], style, label=f"{name} {status} p99")
        offset = 0.0
        times, rss = [], []
        for step in steps:
            times += [offset + at for at, _ in step["rss_samples"]]
            rss += [value / MIB for _, value in step["rss_samples"]]
            offset = times[-1] + 1.0
        right.plot(times, rss, label=name)
    left.axhline(report["settings"]["target_shed_p99_ms"], color="grey", linestyle=":")
    left.set_yscale("log")
    left.set_xlabel("offered load (× capacity)")
    left.set_ylabel("p99 latency (ms)")
    left.set_title("Latency of accepted and shed requests")
    right.set_xlabel("seconds under load (steps back to back)")
    right.set_ylabel("service VmRSS (MiB)")
    right.set_title("Service memory")
    for axis in (left, right):
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def run(settings: Settings, progress: Progress) -> dict:
    texts, sources, queries, description = corpus(settings)
    results = {
        "settings": asdict(settings),
        "corpus": description,
        "service": SERVICE | dict(settings.service),
    }
    endpoints: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as work:
        with served_corpus(settings, texts, sources, Path(work), progress, **SERVICE) as process:
            every = endpoint_requests(queries, settings)
            for name, requests in every.items():
                endpoints[name] = measure_endpoint(
                    process.base_url, process.process.pid, name, requests, settings, progress
                )
                progress.checkpoint(results | {"endpoints": endpoints, "targets": []})
            storm_run = storm(process.base_url, queries, settings, progress)
            search_capacity = endpoints["search"]["capacity"]["ok_qps"]
            flood = ingest_flood(
                process.base_url, texts, every["search"][0], search_capacity, settings, progress
            )
    found = targets(endpoints, settings) + extra_targets(storm_run, flood, settings)
    return results | {"endpoints": endpoints, "storm": storm_run, "flood": flood, "targets": found}
