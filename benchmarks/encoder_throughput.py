"""Encoder throughput and latency against the peers users would pick, and the quality cost of
the ONNX Runtime variants.

    python -m benchmarks encoder_throughput                        # full run, about 10 min
    python -m benchmarks encoder_throughput --smoke --out DIR      # tiny, under a minute

Every engine runs on the same thread budget (``--threads``, default 2) and reads the same texts
in one run:

- ``st_torch_fp32``: sentence-transformers on PyTorch (fp32) with the raw all-MiniLM-L6-v2, i.e.
  the 384-d backbone embedding (mean pooling + L2 normalisation), ``torch.set_num_threads``;
- ``fastembed_fp32``: fastembed (Qdrant's ONNX embedder) with the same weights exported to ONNX
  and read from a local folder (:mod:`benchmarks.harness.fastembed_minilm`), its own batching,
  pooling and session (its ``threads``); its vectors are checked against sentence-transformers'
  before anything is timed;
- ``ort_*`` and ``ov_*``: the service's :class:`encoding.encoder.OnnxEncoder` on the bundle's
  ``encoder.onnx`` (``ort_fp32``) and on every variant :mod:`benchmarks.harness.encoder_variants`
  makes (fused offline, dynamic int8 for ONNX Runtime, the fp32 graph on OpenVINO in fp32 and
  bf16, the fast twin's static int8 on OpenVINO and on ONNX Runtime), on the runtime each is
  for, with the thread budget;
- ``service_runtime``: the service's encoder *as served* (``--served``: the fast twin, say),
  ``Runtime.embed`` with its queue and micro-batching (:mod:`benchmarks.harness.served_runtime`),
  a batch of ``n`` texts sent as ``n`` concurrent one-text calls; ``FRACTAL_ENCODER_THREADS`` =
  the budget.

The ONNX graphs compute the backbone *and* the V5 projection (384 → 256, one small matmul per
text), so they do slightly more work than the peers, not less.

Workloads: CLINC-150 utterances (about 11 tokens) and paragraphs of 40–60 tokens
(:func:`benchmarks.harness.paragraphs.paragraphs`). Throughput at each batch size of each
workload; single-text latency on CLINC-150 test utterances. Timing is round-robin (every batch,
or every single text, goes through every engine before the next one), so a change of the
machine's load hits all engines alike; ratios from one run are the numbers to quote.

Through HTTP: ``python -m service`` on the served bundle (its defaults, the same encoder
threads), driven by ``wrk`` (one thread) with one text per ``POST /embed`` at each of
``http_concurrency`` open connections, per workload; skipped, with the reason, where wrk is
missing.

Quality: cosine of each ONNX variant's 256-d vectors with ``ort_fp32``'s, and CLINC-150 k-NN
accuracy (k=5, cosine) at 64-d (domain) and 256-d (intent).

Writes ``encoder_throughput[_smoke].{json,md,png}`` under ``--out`` (default
``benchmarks/results``).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import fastembed
import httpx
import numpy as np
import sentence_transformers
import tokenizers
import torch
from matplotlib.figure import Figure
from sentence_transformers import SentenceTransformer

from benchmarks.harness.encoder_variants import FP32, Variant, build_variants
from benchmarks.harness.fastembed_minilm import (
    export_fastembed_folder,
    fastembed_encode,
    fastembed_model,
)
from benchmarks.harness.live_load import WORKLOADS, server_means, workload_requests
from benchmarks.harness.machine import cpu_flags, load_average
from benchmarks.harness.markdown import bullet_list, markdown_table
from benchmarks.harness.metrics import metric_samples
from benchmarks.harness.paragraphs import paragraphs
from benchmarks.harness.processes import start_service
from benchmarks.harness.runner import DEFAULT_BUNDLE, Progress, bundle_folder, option, yes_no
from benchmarks.harness.served_runtime import ServedRuntime
from benchmarks.harness.wrk import HttpRequest, has_wrk, run_wrk
from bundle import TOKENIZER_FILE, load_bundle
from encoding.encoder import OnnxEncoder
from service.settings import Settings as ServiceSettings
from training.data.registry import data_dir, load_dataset
from training.evaluation.knn import knn_accuracy_table
from training.frozen_encoder import default_model_dir
from training.quantize import row_cosines

TORCH = "st_torch_fp32"
FASTEMBED = "fastembed_fp32"
RUNTIME = "service_runtime"
HTTP = "service_http"
UTTERANCES, PARAGRAPHS = "utterances", "paragraphs"
QUALITY_BATCH = 128
KERNEL_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16")
"""The CPU flags that decide which int8 and bf16 kernels ONNX Runtime and PyTorch can use."""
SOURCES = {
    UTTERANCES: "CLINC-150 training utterances",
    PARAGRAPHS: "Wikipedia sentences joined into paragraphs (benchmarks.harness.paragraphs)",
}
EMBED = next(workload for workload in WORKLOADS if workload.name == "embed")

Encode = Callable[[Sequence[str]], np.ndarray]
"""Texts → one embedding row per text."""


@dataclass(frozen=True)
class Settings:
    """Everything the run depends on; the smoke settings shrink the counts, run one thread per
    engine and leave the fused graph out."""

    bundle: Path = option(DEFAULT_BUNDLE, "V5 bundle folder", parse=bundle_folder)
    served: Path | None = option(
        None,
        "the bundle the service parts (Runtime, HTTP) serve, e.g. the fast twin (default: "
        "--bundle)",
        parse=bundle_folder,
    )
    threads: int = option(
        2,
        "threads of every engine: torch threads, ONNX Runtime intra-op threads, fastembed's "
        "threads, the service's encoder threads",
    )
    fastembed: bool = option(
        True, "time fastembed (exports MiniLM to ONNX first): yes or no", parse=yes_no
    )
    http: bool = option(True, "time POST /embed through HTTP with wrk: yes or no", parse=yes_no)
    fused: bool = True
    """Also time the graph fused offline by ONNX Runtime's transformer optimiser."""
    batch_sizes: tuple[int, ...] = (32, 128)
    utterances: int = 768
    """CLINC-150 training utterances timed per batch size."""
    paragraphs: int = 384
    """Paragraphs timed per batch size (each costs about five utterances)."""
    throughput_rounds: int = 2
    latency_texts: int = 200
    latency_block: int = 20
    """One-text calls each engine makes back to back before the next engine's turn."""
    settle_ms: float = 100.0
    """Idle time after every engine call (:class:`RoundRobin`): over twice the longest spin."""
    http_concurrency: tuple[int, ...] = (1, 8, 32)
    http_seconds: float = 10.0
    http_warmup_seconds: float = 2.0
    knn_train: int = 4000
    knn_test: int = 1000
    knn_prefixes: tuple[int, int] = (64, 256)
    """Domain k-NN accuracy at the first prefix, intent k-NN accuracy at the second."""
    k: int = 5
    seed: int = 42
    min_fastembed_cosine: float = 0.999
    """fastembed's vectors must match sentence-transformers' this closely (the same model)."""
    target_speedup_st: float = 3.0
    """ONNX throughput over sentence-transformers', every workload and batch size."""
    target_speedup_fastembed: float = 1.3
    target_encoder_p50_ms: float = 2.0
    target_http_p50_ms: float = 4.0
    """``POST /embed`` of one utterance at one connection."""
    target_knn_cost_points: float = 0.5
    """The largest k-NN accuracy drop (points) a variant may cost."""
    target_cosine_mean: float = 0.99


SMOKE = Settings(
    threads=1,
    fused=False,
    utterances=64,
    paragraphs=32,
    throughput_rounds=1,
    latency_texts=8,
    latency_block=4,
    settle_ms=5.0,
    http_concurrency=(1,),
    http_seconds=1.0,
    http_warmup_seconds=0.0,
    knn_train=200,
    knn_test=40,
)
"""The smoke run skips the fused graph (the transformer optimiser alone takes seconds) and pauses
only 5 ms after a call: its numbers check the plumbing, not the speed."""


# -- engines ----------------------------------------------------------------------------------


def sentence_transformers_encoder(threads: int) -> Encode:
    """The raw MiniLM through sentence-transformers on ``threads`` torch threads."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder: never ask the hub
    torch.set_num_threads(threads)
    model = SentenceTransformer(str(default_model_dir()), device="cpu")

    def encode(texts: Sequence[str]) -> np.ndarray:
        return model.encode(
            list(texts), batch_size=len(texts), convert_to_numpy=True, show_progress_bar=False
        )

    return encode


def fastembed_encoder(folder: Path, threads: int) -> tuple[Encode, int]:
    """fastembed on the MiniLM exported to ``folder``, each call one ``embed`` with the call's
    texts as one batch; also the intra-op threads its session was given."""
    model = fastembed_model(export_fastembed_folder(default_model_dir(), folder), threads)
    session_threads = model.model.model.get_session_options().intra_op_num_threads
    return lambda texts: fastembed_encode(model, texts, len(texts)), session_threads


def onnx_encoder(variant: Variant, bundle_dir: Path, threads: int) -> Encode:
    """The service's encoder on the variant's graph and runtime (the bundle's manifest describes
    the graph)."""
    encoder = OnnxEncoder(
        variant.folder,
        load_bundle(bundle_dir),
        threads,
        runtime=variant.runtime,  # type: ignore[arg-type]
        precision=variant.precision,
    )
    return lambda texts: encoder.encode(texts).vectors


def runtime_settings(bundle_dir: Path, index_dir: Path, threads: int) -> ServiceSettings:
    """The service's settings for the in-process runtime: its defaults, the thread budget, an
    exact index only (nothing is searched), and no refusal on the queue's estimated wait (so
    that every text of a 128-text round is encoded, not shed)."""
    return ServiceSettings(
        bundle_dir=bundle_dir,
        index_dir=index_dir,
        encoder_threads=threads,
        queue_deadline_ms=0,
        index_kinds=("exact",),
        snapshot_interval_s=0,
    )


# -- timing -----------------------------------------------------------------------------------


@dataclass
class RoundRobin:
    """Times one engine call at a time, then idles ``settle_s`` (untimed) before the next call.

    Some libraries leave their threads spinning after a call (at 2 threads on the development
    machine: PyTorch's OpenMP pool for 10 to 20 ms, fastembed's ONNX Runtime session for about
    40 ms); without the pause that spinning would take a core from whichever engine is timed
    next. The CPU the
    process burns during the pauses is kept per engine (:meth:`idle_cpu_ms`), so the report
    shows who spins.
    """

    encoders: Mapping[str, Encode]
    settle_s: float
    idle_cpu_s: dict[str, list[float]] = field(default_factory=dict)

    def seconds(self, name: str, texts: Sequence[str]) -> float:
        """Wall seconds of one call of engine ``name`` on ``texts``."""
        return self.block(name, [texts])[0]

    def block(self, name: str, calls: Sequence[Sequence[str]]) -> list[float]:
        """Wall seconds of each of engine ``name``'s ``calls``, made back to back, then the
        pause."""
        elapsed = []
        for texts in calls:
            start = time.perf_counter()
            self.encoders[name](texts)
            elapsed.append(time.perf_counter() - start)
        cpu = time.process_time()
        time.sleep(self.settle_s)
        self.idle_cpu_s.setdefault(name, []).append(time.process_time() - cpu)
        return elapsed

    def idle_cpu_ms(self) -> dict[str, float]:
        """Mean CPU milliseconds the process used in the pause after each engine's calls."""
        return {name: 1000 * float(np.mean(values)) for name, values in self.idle_cpu_s.items()}


def throughput(
    engines: RoundRobin, texts: Sequence[str], batch_size: int, rounds: int
) -> dict[str, float]:
    """Texts per second of each engine over ``texts`` in batches of ``batch_size``.

    Each batch goes through every engine in turn (after one untimed warm-up batch each); the
    rate uses each engine's median total time over ``rounds`` passes.
    """
    batches = [texts[start : start + batch_size] for start in range(0, len(texts), batch_size)]
    for name in engines.encoders:
        engines.seconds(name, batches[0])
    totals: dict[str, list[float]] = {name: [] for name in engines.encoders}
    for _ in range(rounds):
        spent = dict.fromkeys(engines.encoders, 0.0)
        for batch in batches:
            for name in engines.encoders:
                spent[name] += engines.seconds(name, batch)
        for name, seconds in spent.items():
            totals[name].append(seconds)
    return {name: len(texts) / float(np.median(times)) for name, times in totals.items()}


def single_text_latency(
    engines: RoundRobin, texts: Sequence[str], block: int
) -> dict[str, dict[str, float]]:
    """p50/p99/mean milliseconds of one call with one text, one text after the other as at one
    client: ``texts`` in blocks of ``block``, each block through every engine in turn, back to
    back within the block (its first call untimed, so that no engine is timed waking its
    threads after the pause; the pause keeps other engines' spinning out)."""
    timings: dict[str, list[float]] = {name: [] for name in engines.encoders}
    for start in range(0, len(texts), block):
        calls = [[text] for text in texts[start : start + block]]
        for name in engines.encoders:
            seconds = engines.block(name, [calls[0], *calls])[1:]
            timings[name].extend(1000 * value for value in seconds)
    return {
        name: {
            "p50_ms": float(np.percentile(values, 50)),
            "p99_ms": float(np.percentile(values, 99)),
            "mean_ms": float(np.mean(values)),
        }
        for name, values in timings.items()
    }


def token_counts(bundle_dir: Path, texts: Sequence[str]) -> dict[str, float]:
    """Mean, min and max tokens per text as the bundle's tokenizer reads them (special tokens
    included, padding not)."""
    tokenizer = tokenizers.Tokenizer.from_file(str(bundle_dir / TOKENIZER_FILE))
    counts = [sum(encoding.attention_mask) for encoding in tokenizer.encode_batch(list(texts))]
    return {"mean": round(float(np.mean(counts)), 1), "min": min(counts), "max": max(counts)}


# -- through HTTP -----------------------------------------------------------------------------


def http_cell(
    base_url: str,
    metrics: httpx.Client,
    requests: Sequence[HttpRequest],
    connections: int,
    settings: Settings,
) -> dict:
    """wrk at ``connections`` open connections (``http_warmup_seconds`` untimed, then
    ``http_seconds``): texts a second, latency, errors, and the texts per encoder call that
    the service's own histograms saw (read from ``/metrics`` through ``metrics``)."""
    if settings.http_warmup_seconds > 0:
        run_wrk(base_url, requests, connections, settings.http_warmup_seconds)
    before = metric_samples(metrics)
    result = run_wrk(base_url, requests, connections, settings.http_seconds)
    server = server_means(before, metric_samples(metrics))
    return {
        "concurrency": connections,
        "texts_per_s": result.ok_qps,
        "p50_ms": result.p50_ms,
        "p90_ms": result.p90_ms,
        "p99_ms": result.p99_ms,
        "requests": result.requests,
        "errors": result.errors,
        "texts_per_encode_call": server["texts_per_encode_call"],
        "wrk_cpu_percent": result.client_cpu_percent,
    }


def http_embed(
    bundle_dir: Path,
    workloads: Mapping[str, Sequence[str]],
    settings: Settings,
    work: Path,
    progress: Progress,
) -> dict:
    """``POST /embed`` with one text per request (:func:`http_cell`) at each concurrency of each
    workload, the service started on the bundle with the thread budget; ``{"skipped": why}``
    without wrk."""
    if not settings.http:
        return {"skipped": "not asked for (--http no)"}
    if not has_wrk():
        return {"skipped": "wrk is not installed (apt-get install wrk)"}
    service = {"encoder_threads": settings.threads, "index_kinds": "exact"}
    process = start_service(bundle_dir, work / "http-index", work / "service.log", **service)
    rows = []
    try:
        with httpx.Client(base_url=process.base_url, timeout=60) as metrics:
            for workload, texts in workloads.items():
                requests = workload_requests(EMBED, texts, 0)
                for connections in settings.http_concurrency:
                    cell = http_cell(process.base_url, metrics, requests, connections, settings)
                    rows.append({"workload": workload} | cell)
                    progress(
                        f"HTTP {workload} c={connections}: {cell['texts_per_s']:.0f} texts/s, "
                        f"p50 {cell['p50_ms']:.2f} ms"
                    )
    finally:
        process.shut_down()
    settings_used = {f"FRACTAL_{key.upper()}": value for key, value in service.items()}
    return {"service_settings": settings_used, "rows": rows}


# -- quality ----------------------------------------------------------------------------------


def encode_all(encode: Encode, texts: Sequence[str]) -> np.ndarray:
    """All ``texts`` in batches of :data:`QUALITY_BATCH`, stacked."""
    parts = [
        encode(texts[start : start + QUALITY_BATCH])
        for start in range(0, len(texts), QUALITY_BATCH)
    ]
    return np.concatenate(parts).astype(np.float32)


def same_model_check(
    fastembed: Encode, reference: Encode, texts: Sequence[str], floor: float
) -> dict:
    """Cosines of fastembed's vectors with sentence-transformers' on ``texts``; a
    :class:`RuntimeError` when any is under ``floor`` (then it is not the same model)."""
    cosines = row_cosines(encode_all(fastembed, texts), encode_all(reference, texts))
    if cosines.min() < floor:
        raise RuntimeError(
            f"fastembed's vectors differ from sentence-transformers' (cosine {cosines.min():.4f}"
            f" < {floor}): it does not run the same model"
        )
    return {
        "texts": len(texts),
        "cosine_min": float(cosines.min()),
        "cosine_mean": float(cosines.mean()),
    }


def quality(
    encoders: Mapping[str, Encode], data, settings: Settings
) -> dict[str, dict[str, float]]:
    """Per ONNX encoder: cosines with the first one's vectors (``ort_fp32``) on the test texts,
    k-NN accuracies, and the k-NN cost in points (the largest drop from ``ort_fp32``)."""
    coarse, fine = settings.knn_prefixes
    rows: dict[str, dict[str, float]] = {}
    reference: np.ndarray | None = None
    for name, encode in encoders.items():
        train = encode_all(encode, data.train.texts)
        test = encode_all(encode, data.test.texts)
        if reference is None:
            reference = test
        table = knn_accuracy_table(
            train, data.train.labels, test, data.test.labels, [coarse, fine], k=settings.k
        )
        full = row_cosines(test, reference)
        prefix = row_cosines(test[:, :coarse], reference[:, :coarse])
        rows[name] = {
            "cosine_mean": float(full.mean()),
            "cosine_min": float(full.min()),
            f"cosine_{coarse}d_mean": float(prefix.mean()),
            f"cosine_{coarse}d_min": float(prefix.min()),
            f"knn_domain_at_{coarse}d": float(table[0, 0]),
            f"knn_intent_at_{fine}d": float(table[1, 1]),
        }
    for row in rows.values():
        row["knn_cost_points"] = 100 * max(
            rows[FP32][key] - row[key] for key in row if key.startswith("knn_")
        )
    return rows


# -- targets ----------------------------------------------------------------------------------


def _target(target: str, engine: str, reached: str, met: bool) -> dict:
    return {"target": target, "encoder": engine, "reached": reached, "met": met}


def _http_row(report: dict, workload: str, connections: int) -> dict | None:
    rows = report["http"].get("rows", [])
    found = [r for r in rows if r["workload"] == workload and r["concurrency"] == connections]
    return found[0] if found else None


def targets(report: dict, settings: Settings) -> list[dict]:
    """Each target, per ONNX variant it applies to: the number, the bar, met or missed."""
    rows = []
    variants = report["onnx_variants"]
    peers = [(TORCH, "sentence-transformers", settings.target_speedup_st)]
    if FASTEMBED in report["engines"]:
        peers.append((FASTEMBED, "fastembed", settings.target_speedup_fastembed))
    for peer, peer_name, bar in peers:
        for workload, by_size in report["throughput_texts_per_s"].items():
            for size, rates in by_size.items():
                goal = f"throughput ≥ {bar:g}× {peer_name}, {workload}, batch {size}"
                for name in variants:
                    ratio = rates[name] / rates[peer]
                    rows.append(_target(goal, name, f"{ratio:.2f}×", ratio >= bar))
    goal = f"single short text p50 ≤ {settings.target_encoder_p50_ms:g} ms in the encoder"
    for name in variants:
        p50 = report["single_text_latency"][name]["p50_ms"]
        rows.append(_target(goal, name, f"{p50:.2f} ms", p50 <= settings.target_encoder_p50_ms))
    goal = f"single short text p50 ≤ {settings.target_http_p50_ms:g} ms through HTTP (wrk c=1)"
    http = _http_row(report, UTTERANCES, 1)
    if http is None:
        why = report["http"].get("skipped", "no c=1 cell")
        rows.append(_target(goal, HTTP, f"not measured: {why}", False))
    else:
        p50 = http["p50_ms"]
        rows.append(_target(goal, HTTP, f"{p50:.2f} ms", p50 <= settings.target_http_p50_ms))
    for name, row in report["quality"].items():
        if name == FP32:
            continue
        cost, cosine = row["knn_cost_points"], row["cosine_mean"]
        rows.append(
            _target(
                f"k-NN cost ≤ {settings.target_knn_cost_points:g} points",
                name,
                f"{cost:.2f} pt",
                cost <= settings.target_knn_cost_points,
            )
        )
        rows.append(
            _target(
                f"mean cosine to {FP32} ≥ {settings.target_cosine_mean:g}",
                name,
                f"{cosine:.4f}",
                cosine >= settings.target_cosine_mean,
            )
        )
    return rows


# -- report -----------------------------------------------------------------------------------


def speed_table(report: dict, workload: str) -> str:
    """Texts a second of every engine on ``workload`` at each batch size, and the ratios to the
    peers."""
    by_size = report["throughput_texts_per_s"][workload]
    peers = [peer for peer in (TORCH, FASTEMBED) if peer in report["engines"]]
    headers = ["engine"]
    for size in by_size:
        headers += [f"texts/s @ {size}"] + [f"× {_short(peer)} @ {size}" for peer in peers]
    rows = []
    for name in report["engines"]:
        cells: list[object] = [f"`{name}`"]
        for rates in by_size.values():
            cells += [f"{rates[name]:.0f}"] + [f"{rates[name] / rates[p]:.2f}" for p in peers]
        rows.append(cells)
    return markdown_table(headers, rows)


def _short(engine: str) -> str:
    return {TORCH: "ST", FASTEMBED: "fastembed"}[engine]


def latency_table(report: dict) -> str:
    """Single-text latency of every engine, and the CPU it used after its calls."""
    latency = report["single_text_latency"]
    idle = report["idle_cpu_ms_after_call"]
    rows = [
        [
            f"`{name}`",
            f"{row['p50_ms']:.2f}",
            f"{row['p99_ms']:.2f}",
            f"{row['mean_ms']:.2f}",
            f"{latency[TORCH]['p50_ms'] / row['p50_ms']:.2f}",
            f"{idle[name]:.1f}",
        ]
        for name, row in latency.items()
    ]
    headers = ["engine", "p50 ms", "p99 ms", "mean ms", "p50 speed-up over ST"]
    return markdown_table([*headers, "CPU ms after a call"], rows)


def served_section(report: dict) -> str:
    """The runtime's batching, and the HTTP cells (or why they were skipped)."""
    runtime = report["service_runtime"]
    batching = [
        f"{workload} @ {size}: {texts:.1f}"
        for workload, by_size in runtime["texts_per_encode_call"].items()
        for size, texts in by_size.items()
    ]
    lines = [
        f"`{RUNTIME}` settings: {runtime['settings']}. Mean texts per encoder call while it was "
        "timed (the queue gathers the concurrent one-text calls): " + ", ".join(batching) + ".",
    ]
    http = report["http"]
    if "skipped" in http:
        lines.append(f"HTTP (`POST /embed` with wrk): skipped, {http['skipped']}.")
        return "\n\n".join(lines)
    rows = [
        [
            row["workload"],
            row["concurrency"],
            f"{row['texts_per_s']:.0f}",
            f"{row['p50_ms']:.2f}",
            f"{row['p90_ms']:.2f}",
            f"{row['p99_ms']:.2f}",
            sum(row["errors"].values()),
            "–" if row["texts_per_encode_call"] is None else f"{row['texts_per_encode_call']:.1f}",
            f"{row['wrk_cpu_percent']:.0f}",
        ]
        for row in http["rows"]
    ]
    headers = [
        "workload",
        "connections",
        "texts/s",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "errors",
        "texts per encoder call",
        "wrk CPU %",
    ]
    lines += [
        f"HTTP: `python -m service` on `{report['served_bundle']}` with "
        + str(http["service_settings"])
        + " (its "
        "other settings default), one text per `POST /embed`, wrk (one thread) on the same "
        "cores, measured after the round-robin (not inside it).",
        markdown_table(headers, rows),
    ]
    return "\n\n".join(lines)


def _quality_cell(key: str, value: float) -> str:
    """Accuracies in %, cosines to four places, the cost in points to two."""
    if key.startswith("cosine"):
        return f"{value:.4f}"
    return f"{value:.2f}" if key == "knn_cost_points" else f"{100 * value:.2f}"


def quality_table(report: dict) -> str:
    columns = list(next(iter(report["quality"].values())))
    rows = []
    for name, row in report["quality"].items():
        cells = [f"`{name}`"]
        cells += [_quality_cell(key, row[key]) for key in columns]
        rows.append(cells)
    headers = ["encoder"] + [
        key.replace("_", " ") + (" (%)" if key.startswith("knn_") and "cost" not in key else "")
        for key in columns
    ]
    return markdown_table(headers, rows)


def workloads_table(report: dict) -> str:
    rows = [
        [
            name,
            row["texts"],
            row["tokens"]["mean"],
            row["tokens"]["min"],
            row["tokens"]["max"],
            row["source"],
        ]
        for name, row in report["data"]["workloads"].items()
    ]
    return markdown_table(["workload", "texts", "tokens mean", "min", "max", "source"], rows)


def threads_text(report: dict) -> str:
    machine = report["machine"]
    fastembed_threads = (
        f"`threads={machine['fastembed_threads']}` (its session's intra-op and inter-op threads, "
        "ONNX Runtime's default spinning)"
        if "fastembed_threads" in machine
        else "not timed"
    )
    return (
        f"Thread budget: {report['settings']['threads']} for every engine. PyTorch: "
        f"`torch.set_num_threads({machine['torch_threads']})`; ONNX Runtime (`ort_*`): "
        f"{machine['ort_intra_op_threads']} intra-op threads, 1 inter-op, spinning off (the "
        f"service's session); fastembed: {fastembed_threads}; the service: "
        f"`FRACTAL_ENCODER_THREADS={machine['service_encoder_threads']}`. After every timed "
        f"call the benchmark idles {report['settings']['settle_ms']:g} ms, untimed, so that "
        "threads left spinning by one library do not slow the next engine; the CPU used in "
        "those pauses is in the latency table. The cores are shared with other work: see the "
        "load averages below."
    )


def targets_matrix(targets: Sequence[Mapping]) -> str:
    """The targets as one row per target and one column per engine it applies to; each cell
    the number reached and the verdict."""
    engines = list(dict.fromkeys(row["encoder"] for row in targets))
    cells: dict[str, dict[str, str]] = {}
    for row in targets:
        verdict = "met" if row["met"] else "**missed**"
        cells.setdefault(row["target"], {})[row["encoder"]] = f"{row['reached']} {verdict}"
    rows = [
        [target, *(by_engine.get(engine, "") for engine in engines)]
        for target, by_engine in cells.items()
    ]
    return markdown_table(["target", *(f"`{engine}`" for engine in engines)], rows)


def markdown(report: dict) -> str:
    settings = report["settings"]
    recipes = "\n".join(f"- `{name}`: {text}" for name, text in report["engines"].items())
    check = report["fastembed_check"]
    check_text = (
        f"fastembed runs the same model: cosine with sentence-transformers' vectors min "
        f"{check['cosine_min']:.5f}, mean {check['cosine_mean']:.5f} over {check['texts']} "
        f"texts (required ≥ {settings['min_fastembed_cosine']})."
        if "cosine_min" in check
        else f"fastembed: {check['skipped']}."
    )
    speed = [
        f"### {workload}\n\n" + speed_table(report, workload)
        for workload in report["throughput_texts_per_s"]
    ]
    return "\n\n".join(
        [
            "# Encoder throughput against the peers, and quantisation"
            + (" (smoke run)" if report["smoke"] else ""),
            f"Produced by `{report['command']}`. All engines measured in one run, round-robin "
            "(each batch or text through every engine in turn): quote the ratios, not the "
            "absolute rates, on this shared machine.",
            "## Engines\n\n" + recipes,
            "`st_torch_fp32` and `fastembed_fp32` compute the raw 384-d MiniLM embedding; the "
            "ONNX graphs compute the same backbone plus the V5 projection to 256-d (one 384×256 "
            "matmul per text, a negligible share of the six transformer layers), so the "
            "comparison is not tilted towards them. " + check_text,
            threads_text(report),
            "## Workloads\n\n" + workloads_table(report),
            "## Throughput (texts/s)\n\n"
            + "\n\n".join(speed)
            + f"\n\nMedian of {settings['throughput_rounds']} round(s). `{RUNTIME}`: a batch of "
            "n texts is n concurrent one-text `Runtime.embed` calls.",
            "## Single-text latency\n\n"
            + latency_table(report)
            + f"\n\n{report['data']['latency_texts']} CLINC-150 test utterances one at a time "
            f"(tokens per text: {report['data']['latency_tokens']}), as at one client: in blocks "
            f"of {settings['latency_block']} calls back to back per engine (the first untimed), "
            "engines in turn, the pause between blocks.",
            "## The service as served\n\n" + served_section(report),
            "## Quality of the ONNX variants\n\n" + quality_table(report),
            f"Cosines: each variant's vectors against `{FP32}`'s on the "
            f"{report['data']['knn_test']} test texts (full 256-d and the 64-d prefix). k-NN: "
            f"k={settings['k']}, cosine, {report['data']['knn_train']} training → "
            f"{report['data']['knn_test']} test texts; domain at {settings['knn_prefixes'][0]}-d, "
            f"intent at {settings['knn_prefixes'][1]}-d. Cost = the larger accuracy drop from "
            f"`{FP32}`, in points.",
            "## Targets\n\n" + targets_matrix(report["targets"]),
            "## Machine and settings\n\n" + bullet_list(report["machine"]),
            "Load average by phase: " + str(report["load_average_by_phase"]),
            bullet_list(settings),
        ]
    )


def plot(report: dict, path: Path) -> None:
    """One throughput panel per workload, then single-text latency (with HTTP at c=1)."""
    names = list(report["engines"])
    workloads = report["throughput_texts_per_s"]
    figure = Figure(figsize=(6 * (len(workloads) + 1), 5))
    axes = figure.subplots(1, len(workloads) + 1)
    positions = np.arange(len(names))
    for axis, (workload, by_size) in zip(axes, workloads.items(), strict=False):
        width = 0.8 / len(by_size)
        for offset, (size, rates) in enumerate(by_size.items()):
            axis.bar(
                positions + offset * width, [rates[n] for n in names], width, label=f"batch {size}"
            )
        axis.set_xticks(positions + width * (len(by_size) - 1) / 2)
        axis.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        axis.set_ylabel("texts / s")
        axis.set_title(f"Throughput, {workload} (higher is better)")
        axis.legend()
    latency = dict(report["single_text_latency"])
    http = _http_row(report, UTTERANCES, 1)
    if http is not None:
        latency[f"{HTTP} (wrk c=1)"] = http
    labels = list(latency)
    spots = np.arange(len(labels))
    right = axes[-1]
    right.bar(spots - 0.2, [latency[n]["p50_ms"] for n in labels], 0.4, label="p50")
    right.bar(spots + 0.2, [latency[n]["p99_ms"] for n in labels], 0.4, label="p99")
    right.axhline(report["settings"]["target_encoder_p50_ms"], color="grey", ls="--", lw=1)
    right.set_xticks(spots)
    right.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    right.set_ylabel("ms")
    right.set_title("One short text per call (lower is better)")
    right.legend()
    machine, settings = report["machine"], report["settings"]
    figure.suptitle(f"Engines on {machine['cpu_model']}, {settings['threads']} thread(s) each")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


# -- run --------------------------------------------------------------------------------------


def run(settings: Settings, progress: Progress) -> dict:
    bundle_dir = settings.bundle
    loads: dict[str, list[float]] = {}

    def phase(name: str) -> None:
        progress(name)
        loads[name] = load_average()

    data = load_dataset(
        "clinc150", max_train=settings.knn_train, max_test=settings.knn_test, seed=settings.seed
    )
    workloads = {
        UTTERANCES: list(data.train.texts[: settings.utterances]),
        PARAGRAPHS: paragraphs(data_dir(), settings.paragraphs, settings.seed),
    }
    latency_texts = list(data.test.texts[: settings.latency_texts])
    flags = set(cpu_flags())
    machine: dict = {
        "cpu_kernel_flags": {flag: flag in flags for flag in KERNEL_FLAGS},
        "tokenizers": tokenizers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "fastembed": fastembed.__version__,
        "torch_threads": settings.threads,
        "ort_intra_op_threads": settings.threads,
        "ort_inter_op_threads": 1,
        "ort_graph_optimization_level": "ORT_ENABLE_ALL (the service's session)",
        "service_encoder_threads": settings.threads,
    }
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        phase("building the engines")
        recipes = {TORCH: "sentence-transformers, raw all-MiniLM-L6-v2, PyTorch fp32"}
        encoders = {TORCH: sentence_transformers_encoder(settings.threads)}
        machine["torch_threads"] = torch.get_num_threads()
        check: dict = {"skipped": "not asked for (--fastembed no)"}
        if settings.fastembed:
            encoders[FASTEMBED], machine["fastembed_threads"] = fastembed_encoder(
                work / "fastembed", settings.threads
            )
            recipes[FASTEMBED] = (
                f"fastembed {fastembed.__version__}, its own all-MiniLM-L6-v2 pipeline "
                "(mean pooling + L2 normalisation) on the same weights exported to ONNX fp32, "
                "read from a local folder"
            )
            check_texts = latency_texts + workloads[PARAGRAPHS][: len(latency_texts)]
            check = same_model_check(
                encoders[FASTEMBED], encoders[TORCH], check_texts, settings.min_fastembed_cosine
            )
        variants = build_variants(bundle_dir, work, settings.fused, data.train.texts)
        for name, variant in variants.items():
            recipes[name] = f"{variant.recipe}; on {variant.runtime}, {variant.precision} compute"
            encoders[name] = onnx_encoder(variant, bundle_dir, settings.threads)
        served_bundle = settings.served or bundle_dir
        recipes[RUNTIME] = (
            f"the served bundle {served_bundle} through service.runtime.Runtime.embed (queue + "
            "micro-batching, FRACTAL_ENCODER_RUNTIME=auto), one concurrent call per text"
        )
        served_settings = runtime_settings(served_bundle, work / "runtime-index", settings.threads)
        rates: dict[str, dict[str, dict[str, float]]] = {}
        batching: dict[str, dict[str, float]] = {}
        with ServedRuntime(served_settings) as served:
            encoders[RUNTIME] = served.encode
            engines = RoundRobin(encoders, settings.settle_ms / 1000)
            for workload, texts in workloads.items():
                rates[workload], batching[workload] = {}, {}
                for size in settings.batch_sizes:
                    phase(f"throughput, {workload}, batch {size}")
                    texts_before, calls_before = served.encoder_calls()
                    rates[workload][str(size)] = throughput(
                        engines, texts, size, settings.throughput_rounds
                    )
                    texts_after, calls_after = served.encoder_calls()
                    batching[workload][str(size)] = (texts_after - texts_before) / (
                        calls_after - calls_before
                    )
            phase("single-text latency")
            latency = single_text_latency(engines, latency_texts, settings.latency_block)
        phase("quality of the ONNX variants")
        scores = quality({name: encoders[name] for name in variants}, data, settings)
        phase("HTTP")
        http = http_embed(served_bundle, workloads, settings, work, progress)
    loads["end"] = load_average()
    runtime_keys = ("encoder_threads", "encoder_spin", "max_batch_size", "max_wait_ms")
    report = {
        "machine": machine,
        "bundle": str(bundle_dir),
        "served_bundle": str(served_bundle),
        "data": {
            "workloads": {
                name: {
                    "texts": len(texts),
                    "tokens": token_counts(bundle_dir, texts),
                    "source": SOURCES[name],
                }
                for name, texts in workloads.items()
            },
            "latency_texts": len(latency_texts),
            "latency_tokens": token_counts(bundle_dir, latency_texts),
            "knn_train": len(data.train),
            "knn_test": len(data.test),
        },
        "settings": asdict(settings),
        "engines": recipes,
        "onnx_variants": list(variants),
        "fastembed_check": check,
        "service_runtime": {
            "settings": {key: getattr(served_settings, key) for key in runtime_keys}
            | {"queue_deadline_ms": served_settings.queue_deadline_ms},
            "texts_per_encode_call": batching,
        },
        "throughput_texts_per_s": rates,
        "single_text_latency": latency,
        "idle_cpu_ms_after_call": engines.idle_cpu_ms(),
        "http": http,
        "quality": scores,
        "load_average_by_phase": loads,
    }
    return report | {"targets": targets(report, settings)}
