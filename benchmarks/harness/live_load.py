"""Load on the live service: its corpus, its ingest, the service serving it, its requests as a
load generator sends them, the encoder's own rate, and one load cell (:func:`load_cell`) with
what the service's own histograms saw over it.

Corpus: every distinct sentence of the data folder (:func:`benchmarks.harness.search_data.
real_sentences`) except the query texts, topped up to ``documents`` with *composed* documents,
each two distinct random sentences of the corpus joined by a space (seeded; all texts distinct).
Queries: CLINC-150 in-scope test utterances, held out of the corpus.

A cell keeps ``concurrency`` requests of one workload in flight, each connection sending its
next request as soon as the last one is answered. Its load comes from ``wrk``
(:func:`wrk_cell`: a compiled generator, one thread, so that the client does not take the
service's cores): ``warmup_seconds`` untimed, then ``seconds_per_cell``. Without ``wrk`` (or
with ``--generator python``) the asyncio client drives it (:func:`python_cell`): each worker
sends until ``requests`` are sent or ``seconds`` pass, whichever comes first; it runs on the
service's cores and takes a good part of them, so its figures are lower bounds. Where the time
went comes from the service's own histograms, ``/metrics`` read before and after the cell
(:func:`server_means`), so that neither generator has to read the answers.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import httpx
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from benchmarks.harness.metrics import Samples, metric_samples, metric_total
from benchmarks.harness.process_cpu import cpu_seconds
from benchmarks.harness.processes import ServiceProcess, start_service
from benchmarks.harness.runner import (
    DEFAULT_BUNDLE,
    Progress,
    bundle_folder,
    key_values,
    option,
    yes_no,
)
from benchmarks.harness.search_data import clinc_test_texts, real_sentences
from benchmarks.harness.wrk import HttpRequest, has_wrk, run_wrk
from bundle import load_bundle
from client import FractalClient
from encoding.encoder import OnnxEncoder
from training.data.registry import data_dir

MS = 1000.0
SERVICE_CPUS, GENERATOR_CPUS = "0", "1"
"""With ``--pin yes``: the service's CPU and the load generators' CPU (``taskset`` lists)."""
GENERATORS = ("auto", "wrk", "python")


@dataclass(frozen=True)
class CorpusSettings:
    """The corpus and its ingest; a live-service benchmark's ``Settings`` extends it."""

    documents: int = option(100_000, "corpus size")
    queries: int = 2_000
    """Query texts, held out of the corpus."""
    k: int = 10
    ingest_batch: int = 128
    ingest_clients: int = 2
    """``POST /documents`` batches in flight at once."""
    seed: int = 0
    bundle: Path = option(DEFAULT_BUNDLE, "bundle folder", parse=bundle_folder)


@dataclass(frozen=True)
class LoadSettings(CorpusSettings):
    """The load cells of the asyncio client (:func:`measure_cell`)."""

    concurrency: tuple[int, ...] = (1, 8, 32, 64)
    """Requests in flight at once: one cell per value."""
    requests_per_cell: int = 2_000
    seconds_per_cell: float = option(15.0, "time bound of a cell")
    warmup_requests: int = 32
    """Untimed requests before each cell."""


@dataclass(frozen=True)
class ServedSettings(CorpusSettings):
    """Where the service keeps its index, the service settings a run passes through, and
    whether the service and the load generator run on a core each (:func:`served_corpus`)."""

    index_dir: Path | None = option(
        None, "keep the service's index here and reuse it next time (default: a temporary one)"
    )
    service: tuple[tuple[str, str], ...] = option(
        (),
        "service settings passed through, key=value pairs (queue_depth=64 → "
        "FRACTAL_QUEUE_DEPTH=64)",
        parse=key_values,
    )
    pin: bool = option(
        False,
        f"run the service on CPU {SERVICE_CPUS} and the load generators on CPU {GENERATOR_CPUS} "
        "(taskset): yes or no",
        parse=yes_no,
    )

    @property
    def generator_cpus(self) -> str | None:
        """The CPUs the load generators run on (None: any)."""
        return GENERATOR_CPUS if self.pin else None


@dataclass(frozen=True)
class WrkSettings(LoadSettings, ServedSettings):
    """The cells of :func:`load_cell` on a served corpus (:class:`ServedSettings`: ``pin`` puts
    wrk on its own core): wrk's, with the asyncio client's (:class:`LoadSettings`) as the
    fallback; ``seconds_per_cell`` bounds both."""

    generator: str = option(
        "auto", "wrk, or python (the asyncio client); auto: wrk when it is installed"
    )
    warmup_seconds: float = 2.0
    """Untimed wrk load before each cell."""
    wrk_threads: int = 1


@dataclass(frozen=True)
class Workload:
    """One kind of request: its method, path, and how a query text (and k) becomes its
    arguments."""

    name: str
    method: str
    path: str
    arguments: Callable[[str, int], dict]

    @property
    def is_search(self) -> bool:
        return self.path == "/search"


def _search_params(granularity: str, rerank: str) -> Callable[[str, int], dict]:
    def arguments(query: str, k: int) -> dict:
        params = {"q": query, "k": k, "granularity": granularity, "index": "hnsw"}
        return {"params": params | {"rerank": rerank}}

    return arguments


WORKLOADS = (
    Workload("embed", "POST", "/embed", lambda query, _: {"json": {"texts": [query]}}),
    Workload("coarse", "GET", "/search", _search_params("coarse", "none")),
    Workload("fine", "GET", "/search", _search_params("fine", "none")),
    Workload("c2f", "GET", "/search", _search_params("fine", "c2f")),
)


def openai_workload(
    model: str,
    *,
    name: str = "openai",
    path: str = "/v1/embeddings",
    batches: Mapping[str, list[str]] | None = None,
) -> Workload:
    """An OpenAI-style embeddings request for ``model`` (default: Fractal's
    ``POST /v1/embeddings`` with one text as its input); with ``batches``, the input is the list
    of texts ``batches`` gives for the query text (the same request shape for any server)."""

    def arguments(query: str, _: int) -> dict:
        return {"json": {"input": query if batches is None else batches[query], "model": model}}

    return Workload(name, "POST", path, arguments)


def workload_request(workload: Workload, query: str, k: int) -> HttpRequest:
    """``workload``'s request for ``query`` as a load generator sends it."""
    arguments = workload.arguments(query, k)
    if "json" in arguments:
        return HttpRequest.post_json(workload.path, arguments["json"])
    return HttpRequest(workload.method, f"{workload.path}?{urlencode(arguments['params'])}")


def workload_requests(workload: Workload, queries: Sequence[str], k: int) -> list[HttpRequest]:
    return [workload_request(workload, query, k) for query in queries]


def corpus(settings: CorpusSettings) -> tuple[list[str], list[str], list[str], dict]:
    """``(documents, their sources, queries, description)``; see the module docstring."""
    folder = data_dir()
    rng = np.random.default_rng(settings.seed)
    test_texts = clinc_test_texts(folder)
    if settings.queries > len(test_texts):
        raise SystemExit(f"--queries: at most {len(test_texts)} CLINC-150 test utterances")
    picked = rng.choice(len(test_texts), settings.queries, replace=False)
    queries = [test_texts[i] for i in picked]
    held_out = set(queries)
    texts, sources = [], []
    for source, sentences in real_sentences(folder).items():
        kept = [text for text in sentences if text not in held_out]
        texts += kept
        sources += [source] * len(kept)
    order = rng.permutation(len(texts))[: settings.documents]
    texts, sources = [texts[i] for i in order], [sources[i] for i in order]
    real = len(texts)
    seen = set(texts) | held_out
    while len(texts) < settings.documents:
        first, second = rng.choice(real, 2, replace=False)
        text = f"{texts[first]} {texts[second]}"
        if text not in seen:
            seen.add(text)
            texts.append(text)
            sources.append("composed")
    description = {
        "documents": len(texts),
        "real_sentences": real,
        "composed_documents": len(texts) - real,
        "by_source": dict(Counter(sources)),
        "queries": f"{len(queries)} CLINC-150 in-scope test utterances, held out of the corpus",
    }
    return texts, sources, queries, description


@contextmanager
def served_corpus(
    settings: ServedSettings,
    texts: Sequence[str],
    sources: Sequence[str],
    work: Path,
    progress: Progress,
    **service: object,
) -> Iterator[ServiceProcess]:
    """The service on ``settings.index_dir`` (default: ``work/index``) with ``service`` and
    ``settings.service`` as its settings (the latter win), pinned with ``settings.pin``, its
    log ``work/service.log``; the corpus is ingested when the index is empty, and an index that
    holds another number of documents is refused. Stopped when the block ends."""
    folder = settings.index_dir or work / "index"
    process = start_service(
        settings.bundle,
        folder,
        work / "service.log",
        cpus=SERVICE_CPUS if settings.pin else None,
        **(service | dict(settings.service)),
    )
    try:
        with FractalClient(process.base_url) as client:
            documents = client.info()["documents"]
        if documents == 0:
            progress(f"ingesting {len(texts):,} documents")
            ingest(
                process.base_url,
                texts,
                sources,
                settings.ingest_batch,
                settings.ingest_clients,
                progress.enabled,
            )
        elif documents != len(texts):
            raise SystemExit(
                f"{folder} holds {documents:,} documents, not {len(texts):,}: "
                "delete it or pass another --index-dir"
            )
        yield process
    finally:
        process.shut_down()


def encoder_rate(
    settings: ServedSettings, threads: int, texts: Sequence[str], batch_size: int, seconds: float
) -> float:
    """Texts a second of the service's encoder (:class:`encoding.encoder.OnnxEncoder`) on
    ``settings.bundle`` in this process, on ``threads`` threads (and the service's CPU when
    ``settings.pin``), encoding ``texts`` in batches of ``batch_size`` for about ``seconds``
    (after one untimed batch): the ceiling of an embedding request's rate."""
    if len(texts) < batch_size:
        raise ValueError(f"{len(texts)} texts do not fill one batch of {batch_size}")
    allowed = os.sched_getaffinity(0)
    if settings.pin:
        os.sched_setaffinity(0, {int(SERVICE_CPUS)})
    try:
        encoder = OnnxEncoder(settings.bundle, load_bundle(settings.bundle), threads)
        starts = range(0, len(texts) - batch_size + 1, batch_size)
        batches = [texts[start : start + batch_size] for start in starts]
        encoder.encode(batches[0])
        done, started = 0, time.perf_counter()
        for batch in itertools.cycle(batches):
            encoder.encode(batch)
            done += len(batch)
            if time.perf_counter() - started >= seconds:
                break
        return done / (time.perf_counter() - started)
    finally:
        os.sched_setaffinity(0, allowed)


def corpus_id(number: int) -> str:
    """The id of the corpus's document ``number`` (``doc-0000000``…) in every load benchmark's
    index, so that one benchmark's folder serves another, and a replacing write meets the
    document it replaces."""
    return f"doc-{number:07d}"


def ingest(
    base_url: str,
    texts: Sequence[str],
    sources: Sequence[str],
    batch_size: int,
    concurrency: int,
    progress: bool,
) -> None:
    """``POST /documents`` in batches, ``concurrency`` batches in flight; ids :func:`corpus_id`
    and metadata ``source``."""
    documents = [
        {"id": corpus_id(i), "text": text, "metadata": {"source": source}}
        for i, (text, source) in enumerate(zip(texts, sources, strict=True))
    ]
    with FractalClient(base_url, timeout_s=600) as client:
        client.add_documents(
            documents, batch_size=batch_size, concurrency=concurrency, progress=progress
        )


async def run_cell(
    client: httpx.AsyncClient,
    workload: Workload,
    queries: Sequence[str],
    concurrency: int,
    requests: int,
    seconds: float,
    offset: int,
    k: int,
) -> dict:
    """Keep ``concurrency`` requests in flight until ``requests`` are sent or ``seconds`` pass;
    the cell's counts, QPS, client CPU share and latency percentiles."""
    loop = asyncio.get_running_loop()
    counter = itertools.count()
    latencies: list[float] = []
    outcomes: Counter[str] = Counter()
    started = loop.time()
    deadline = started + seconds

    async def worker() -> None:
        while loop.time() < deadline and (i := next(counter)) < requests:
            query = queries[(offset + i) % len(queries)]
            sent = loop.time()
            try:
                response = await client.request(
                    workload.method, workload.path, **workload.arguments(query, k)
                )
            except httpx.HTTPError as error:
                outcomes[type(error).__name__] += 1
                continue
            outcomes[str(response.status_code)] += 1
            if response.status_code == 200:
                latencies.append(loop.time() - sent)

    cpu = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = loop.time() - started
    ms = np.asarray(latencies) * MS
    row = {
        "workload": workload.name,
        "concurrency": concurrency,
        "requests": sum(outcomes.values()),
        "ok": len(latencies),
        "failed": sum(outcomes.values()) - len(latencies),
        "outcomes": dict(outcomes),
        "seconds": elapsed,
        "qps": len(latencies) / elapsed,
        "client_cpu_share": (time.process_time() - cpu) / elapsed,
    }
    for name, q in (("p50_ms", 50), ("p90_ms", 90), ("p95_ms", 95), ("p99_ms", 99)):
        row[name] = float(np.percentile(ms, q)) if len(ms) else None
    return row


async def measure_cell(
    client: httpx.AsyncClient,
    workload: Workload,
    queries: Sequence[str],
    concurrency: int,
    offset: int,
    settings: LoadSettings,
) -> dict:
    """An untimed warm-up cell of ``warmup_requests`` (at most a minute), then the measured
    cell (:func:`run_cell`)."""
    cell = (client, workload, queries, concurrency)
    await run_cell(*cell, settings.warmup_requests, 60.0, offset, settings.k)
    return await run_cell(
        *cell, settings.requests_per_cell, settings.seconds_per_cell, offset, settings.k
    )


def generator_of(settings: WrkSettings) -> str:
    """The load generator a run uses: ``wrk`` or ``python``."""
    if settings.generator not in GENERATORS:
        raise SystemExit(f"--generator: one of {', '.join(GENERATORS)}")
    if settings.generator == "auto":
        return "wrk" if has_wrk() else "python"
    return settings.generator


def server_means(before: Samples, after: Samples) -> dict[str, float | None]:
    """What the service's histograms saw between two reads of ``/metrics``: the mean time of an
    index search (ms), of an encoder call (ms), and the mean texts per encoder call."""

    def change(name: str) -> float:
        return metric_total(after, name) - metric_total(before, name)

    def ratio(numerator: float, denominator: float) -> float | None:
        return numerator / denominator if denominator else None

    searches = change("fractal_search_duration_seconds_count")
    calls = change("fractal_encode_duration_seconds_count")
    search_ms = ratio(MS * change("fractal_search_duration_seconds_sum"), searches)
    encode_ms = ratio(MS * change("fractal_encode_duration_seconds_sum"), calls)
    return {
        "search_ms": search_ms,
        "encode_call_ms": encode_ms,
        "texts_per_encode_call": ratio(change("fractal_encode_batch_size_sum"), calls),
    }


def wrk_cell(
    base_url: str,
    workload: Workload,
    queries: Sequence[str],
    concurrency: int,
    settings: WrkSettings,
    pid: int | None = None,
) -> dict:
    """One cell driven by wrk: ``warmup_seconds`` untimed, then ``seconds_per_cell``; with the
    service's process id ``pid``, also the CPU it spent per request in the timed part
    (``service_cpu_ms``: all its threads, encoder included)."""
    requests = workload_requests(workload, queries, settings.k)
    load = {"threads": settings.wrk_threads, "cpus": settings.generator_cpus}
    run_wrk(base_url, requests, concurrency, settings.warmup_seconds, **load)
    cpu_before = None if pid is None else cpu_seconds(pid)
    result = run_wrk(base_url, requests, concurrency, settings.seconds_per_cell, **load)
    service_cpu_ms = (
        None
        if cpu_before is None or pid is None
        else MS * (cpu_seconds(pid) - cpu_before) / max(1, result.requests)
    )
    failed = sum(result.errors.values())
    return {
        "service_cpu_ms": service_cpu_ms,
        "requests": result.requests,
        "ok": result.requests - result.errors["status"],
        "failed": failed,
        "errors": result.errors,
        "seconds": result.seconds,
        "qps": result.ok_qps,
        "p50_ms": result.p50_ms,
        "p90_ms": result.p90_ms,
        "p99_ms": result.p99_ms,
        "client_cpu_percent": result.client_cpu_percent,
    }


def python_cell(
    base_url: str,
    workload: Workload,
    queries: Sequence[str],
    concurrency: int,
    offset: int,
    settings: LoadSettings,
) -> dict:
    """One cell driven by the asyncio client (:func:`measure_cell`), its queries from
    ``offset`` on."""

    async def measured() -> dict:
        limits = httpx.Limits(max_connections=concurrency)
        async with httpx.AsyncClient(base_url=base_url, timeout=60, limits=limits) as client:
            return await measure_cell(client, workload, queries, concurrency, offset, settings)

    row = asyncio.run(measured())
    keys = ("requests", "ok", "failed", "outcomes", "seconds", "qps", "p50_ms", "p90_ms")
    return {key: row[key] for key in (*keys, "p99_ms")} | {
        "client_cpu_percent": 100.0 * row["client_cpu_share"],
        "service_cpu_ms": None,  # the client shares the service's cores: not told apart
    }


def load_cell(
    base_url: str,
    workload: Workload,
    queries: Sequence[str],
    concurrency: int,
    offset: int,
    settings: WrkSettings,
    generator: str,
    pid: int | None = None,
) -> dict:
    """One cell from ``generator`` (:func:`wrk_cell`, with the service's CPU per request when
    its process id ``pid`` is given, or :func:`python_cell` from ``offset``), with the
    service's own means over it (``server``: :func:`server_means`)."""
    with httpx.Client(base_url=base_url, timeout=60) as metrics:
        before = metric_samples(metrics)
        cell = generator_cell(
            base_url, workload, queries, concurrency, offset, settings, generator, pid
        )
        return cell | {"server": server_means(before, metric_samples(metrics))}


def generator_cell(
    base_url: str,
    workload: Workload,
    queries: Sequence[str],
    concurrency: int,
    offset: int,
    settings: WrkSettings,
    generator: str,
    pid: int | None = None,
) -> dict:
    """One cell from ``generator``: :func:`wrk_cell` (with the server's CPU per request when
    its process id ``pid`` is given) or :func:`python_cell` from ``offset``; any server that
    answers ``workload``'s requests."""
    if generator == "wrk":
        return wrk_cell(base_url, workload, queries, concurrency, settings, pid)
    return python_cell(base_url, workload, queries, concurrency, offset, settings)


def concurrency_panels() -> tuple[Figure, Axes, Axes]:
    """A figure with two panels side by side, for QPS and for latency against concurrency."""
    figure = Figure(figsize=(11, 4))
    left, right = figure.subplots(1, 2)
    return figure, left, right


def label_concurrency_panels(left: Axes, right: Axes, latency: str) -> None:
    """Log-2 concurrency axes, the y labels (``latency`` on the right), grids and legends."""
    for axis, label in ((left, "requests per second"), (right, latency)):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("concurrent requests")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
