"""Length-aware batching against FIFO in the encoder queue, on a mix of short and long texts.

    python -m benchmarks batching                        # full run, about 2 min
    python -m benchmarks batching --smoke --out DIR      # tiny, seconds

In process, no HTTP: the service's own :class:`encoding.encoder.OnnxEncoder` on the bundle (2
encoder threads unless ``--threads``, on the runtime the service would pick), and one
:class:`service.batching.MicroBatcher` per policy in front of it, each as the service builds it
(max 32 texts a batch, no wait for a batch to fill, the default budget of padded tokens, a
window of 128 texts):

- ``fifo``: the 32 oldest queued texts, whatever their lengths (the queue before issue 19);
- ``length``: the oldest queued text and the 31 of the window closest to it in token count.

The workload mixes CLINC-150 utterances (about 11 tokens) with paragraphs of 40–60 tokens
(:mod:`benchmarks.harness.paragraphs`): ``--callers`` asyncio callers in a closed loop, each
request a paragraph with probability ``--paragraph-share`` and a CLINC utterance otherwise.
Two workloads: ``single`` (one text a request, as queries come) and ``multi`` (2–4 texts of one
kind a request, as small ingest or batch-query calls come). With more callers than a batch holds,
the queue has texts to choose from; with fewer, both policies make the same batches.

Both policies are measured in one run, in rounds: every round runs each workload under each
policy for ``--cell-s`` seconds (after ``--warmup-s`` seconds of the same load, not counted),
the policies' order alternating from round to round, so that a change of the machine's load hits
both alike. Reported per workload and policy: texts per second, the padded-token share (padding
÷ the padded tokens of the sub-batches the encoder ran: the waste), texts per encoder call, and
request latency p50/p99 per length class (a request's class is its texts').

Writes ``batching[_smoke].{json,md,png}`` under ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import tokenizers
from matplotlib.figure import Figure

from benchmarks.harness.machine import load_average
from benchmarks.harness.markdown import bullet_list, markdown_table, targets_table
from benchmarks.harness.paragraphs import paragraphs
from benchmarks.harness.runner import DEFAULT_BUNDLE, Progress, bundle_folder, option
from bundle import load_bundle
from encoding import TokenIds
from encoding.encoder import Encoded, OnnxEncoder
from encoding.length_batches import DEFAULT_BATCH_TOKENS, DEFAULT_BATCH_WINDOW, padded_tokens
from service.batching import BatchPolicy, MicroBatcher
from service.metrics import Metrics
from training.data.registry import data_dir, load_dataset

POLICIES: tuple[BatchPolicy, ...] = ("fifo", "length")
WORKLOADS = ("single", "multi")
CLASSES = ("short", "paragraph")


@dataclass(frozen=True)
class Settings:
    """Everything the run depends on; the smoke settings shrink the counts and the times."""

    bundle: Path = option(DEFAULT_BUNDLE, "bundle folder", parse=bundle_folder)
    threads: int = option(2, "encoder threads (ONNX Runtime intra-op, or OpenVINO's)")
    callers: int = option(96, "concurrent closed-loop callers")
    paragraph_share: float = option(0.25, "share of requests that send paragraphs")
    multi_texts: tuple[int, int] = option((2, 4), "texts a request in the multi workload: min,max")
    rounds: int = option(4, "rounds, each with every workload under both policies")
    cell_s: float = option(5.0, "measured seconds of one workload under one policy in a round")
    warmup_s: float = option(1.0, "seconds of load before each measurement, not counted")
    max_batch: int = option(32, "texts per encoder call at most (FRACTAL_MAX_BATCH_SIZE)")
    batch_tokens: int = option(DEFAULT_BATCH_TOKENS, "padded tokens per batch at most")
    window: int = option(DEFAULT_BATCH_WINDOW, "queued texts the length policy chooses from")
    short_texts: int = 2000
    """CLINC-150 training utterances drawn from."""
    paragraph_texts: int = 500
    seed: int = 0
    target_throughput_ratio: float = 1.0
    """Length-aware texts/s over FIFO's, at least, on each workload."""
    target_paragraph_p99_ratio: float = 1.25
    """Length-aware paragraph p99 over FIFO's, at most (paragraphs may wait a little longer)."""


SMOKE = Settings(
    threads=1, callers=12, rounds=1, cell_s=0.5, warmup_s=0.2, max_batch=4, window=8,
    short_texts=200, paragraph_texts=40,
)  # fmt: skip
"""Fewer callers, but more than a batch of 4 holds, so that the length policy has a choice."""


# -- the encoder, counting what it pads -------------------------------------------------------


@dataclass
class Tally:
    """What one policy did on one workload, over the measured windows of every round."""

    seconds: float = 0.0
    texts: int = 0
    requests: int = 0
    latencies_s: dict[str, list[float]] = field(
        default_factory=lambda: {name: [] for name in CLASSES}
    )
    encoder_calls: int = 0
    encoded_texts: int = 0
    tokens: int = 0
    padded: int = 0
    rounds_texts_per_s: list[float] = field(default_factory=list)


class CountingEncoder:
    """The encoder as a batcher calls it; while a :class:`Tally` is set, each call's texts, real
    tokens and padded tokens (over the sub-batches the encoder runs) are added to it."""

    def __init__(self, encoder: OnnxEncoder) -> None:
        self.encoder = encoder
        self.tally: Tally | None = None

    def __call__(self, token_ids: list[TokenIds]) -> Encoded:
        tally = self.tally
        if tally is not None:
            lengths = np.array([len(ids) for ids in token_ids], dtype=np.int64)
            tally.encoder_calls += 1
            tally.encoded_texts += len(token_ids)
            tally.tokens += int(lengths.sum())
            tally.padded += sum(
                padded_tokens(lengths[part].tolist()) for part in self.encoder.sub_batches(lengths)
            )
        return self.encoder.encode(token_ids)


# -- load -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Texts:
    """The two pools requests draw from."""

    short: list[str]
    paragraph: list[str]

    def pool(self, kind: str) -> list[str]:
        return self.short if kind == "short" else self.paragraph


async def measure_cell(
    batcher: MicroBatcher,
    counting: CountingEncoder,
    texts: Texts,
    workload: str,
    tally: Tally,
    settings: Settings,
    seed: int,
) -> float:
    """``settings.callers`` closed-loop callers on ``batcher`` for the warm-up and the measured
    window; what completes within the window goes into ``tally``. The window's texts per
    second."""
    loop = asyncio.get_running_loop()
    start = loop.time() + settings.warmup_s
    end = start + settings.cell_s
    counted = 0

    async def caller(index: int) -> None:
        nonlocal counted
        rng = np.random.default_rng([seed, index])
        low, high = settings.multi_texts
        while loop.time() < end:
            kind = "paragraph" if rng.random() < settings.paragraph_share else "short"
            count = 1 if workload == "single" else int(rng.integers(low, high + 1))
            pool = texts.pool(kind)
            request = [pool[int(i)] for i in rng.integers(len(pool), size=count)]
            sent = loop.time()
            await batcher.embed(request)
            done = loop.time()
            if start <= done < end:
                tally.latencies_s[kind].append(done - sent)
                tally.requests += 1
                counted += count

    async def window() -> None:
        await asyncio.sleep(max(0.0, start - loop.time()))
        counting.tally = tally
        await asyncio.sleep(max(0.0, end - loop.time()))
        counting.tally = None

    await asyncio.gather(window(), *(caller(index) for index in range(settings.callers)))
    tally.seconds += settings.cell_s
    tally.texts += counted
    return counted / settings.cell_s


async def measure(
    encoder: OnnxEncoder, texts: Texts, settings: Settings, progress: Progress
) -> tuple[dict[str, dict[str, Tally]], list[dict]]:
    """Every workload under every policy, in alternating rounds; the tallies and, per round,
    the order the policies ran in and the load average after it."""
    countings = {policy: CountingEncoder(encoder) for policy in POLICIES}
    batchers = {
        policy: MicroBatcher(
            countings[policy],
            Metrics(),
            max_batch=settings.max_batch,
            max_wait_s=0.0,
            max_depth=settings.callers * settings.multi_texts[1],
            tokenize=encoder.token_ids,
            policy=policy,
            batch_tokens=settings.batch_tokens,
            window=settings.window,
        )
        for policy in POLICIES
    }
    for batcher in batchers.values():
        batcher.start()
    tallies = {workload: {policy: Tally() for policy in POLICIES} for workload in WORKLOADS}
    rounds = []
    try:
        for number in range(settings.rounds):
            order = POLICIES if number % 2 == 0 else POLICIES[::-1]
            for workload in WORKLOADS:
                for policy in order:
                    tally = tallies[workload][policy]
                    seed = settings.seed + 1000 * number
                    rate = await measure_cell(
                        batchers[policy], countings[policy], texts, workload, tally, settings, seed
                    )
                    tally.rounds_texts_per_s.append(rate)
                    progress(f"round {number + 1}, {workload}, {policy}: {rate:.0f} texts/s")
            rounds.append({"order": list(order), "load_average_1_5_15_min": load_average()})
    finally:
        for batcher in batchers.values():
            await batcher.stop()
    return tallies, rounds


# -- report -----------------------------------------------------------------------------------


def _latency_ms(values: Sequence[float]) -> dict[str, float | int | None]:
    if not values:
        return {"requests": 0, "p50_ms": None, "p99_ms": None}
    milliseconds = 1000 * np.asarray(values)
    return {
        "requests": len(values),
        "p50_ms": round(float(np.percentile(milliseconds, 50)), 2),
        "p99_ms": round(float(np.percentile(milliseconds, 99)), 2),
    }


def cell_report(tally: Tally) -> dict:
    return {
        "texts_per_s": round(tally.texts / tally.seconds, 1),
        "rounds_texts_per_s": [round(rate, 1) for rate in tally.rounds_texts_per_s],
        "texts": tally.texts,
        "requests": tally.requests,
        "padded_token_share": round(1 - tally.tokens / tally.padded, 4) if tally.padded else None,
        "texts_per_encoder_call": (
            round(tally.encoded_texts / tally.encoder_calls, 2) if tally.encoder_calls else None
        ),
        "latency": {kind: _latency_ms(tally.latencies_s[kind]) for kind in CLASSES},
    }


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, 3)


def comparison(cells: dict[str, dict]) -> dict:
    """Length-aware over FIFO, for one workload."""
    fifo, length = cells["fifo"], cells["length"]
    rounds = [
        round(ours / theirs, 3)
        for ours, theirs in zip(
            length["rounds_texts_per_s"], fifo["rounds_texts_per_s"], strict=True
        )
        if theirs
    ]
    return {
        "throughput": _ratio(length["texts_per_s"], fifo["texts_per_s"]),
        "throughput_per_round": rounds,
        **{
            f"{kind}_p99": _ratio(
                length["latency"][kind]["p99_ms"], fifo["latency"][kind]["p99_ms"]
            )
            for kind in CLASSES
        },
    }


def targets(ratios: dict[str, dict], settings: Settings) -> list[dict]:
    rows = []
    for workload, ratio in ratios.items():
        throughput = ratio["throughput"]
        rows.append(
            {
                "target": f"{workload}: length-aware texts/s ≥ "
                f"{settings.target_throughput_ratio:g}× FIFO's",
                "reached": "n/a" if throughput is None else f"{throughput:.2f}×",
                "met": throughput is not None and throughput >= settings.target_throughput_ratio,
            }
        )
        paragraph = ratio["paragraph_p99"]
        rows.append(
            {
                "target": f"{workload}: length-aware paragraph p99 ≤ "
                f"{settings.target_paragraph_p99_ratio:g}× FIFO's",
                "reached": "n/a" if paragraph is None else f"{paragraph:.2f}×",
                "met": paragraph is not None and paragraph <= settings.target_paragraph_p99_ratio,
            }
        )
    return rows


def _cell(value: object, suffix: str = "") -> str:
    return "–" if value is None else f"{value}{suffix}"


def results_table(report: dict, workload: str) -> str:
    rows = []
    for policy, cell in report["cells"][workload].items():
        fifo = report["cells"][workload]["fifo"]["texts_per_s"]
        share = cell["padded_token_share"]
        row = [
            f"`{policy}`",
            f"{cell['texts_per_s']:.0f}",
            f"{cell['texts_per_s'] / fifo:.2f}" if fifo else "–",
            "–" if share is None else f"{100 * share:.1f}%",
            _cell(cell["texts_per_encoder_call"]),
        ]
        for kind in CLASSES:
            latency = cell["latency"][kind]
            row += [_cell(latency["p50_ms"]), _cell(latency["p99_ms"])]
        rows.append(row)
    headers = ["policy", "texts/s", "× fifo", "padding", "texts / call"]
    headers += [f"{kind} {p} ms" for kind in CLASSES for p in ("p50", "p99")]
    return markdown_table(headers, rows)


def markdown(report: dict) -> str:
    settings, data = report["settings"], report["data"]
    sections = [
        "# Length-aware batching vs FIFO" + (" (smoke run)" if report["smoke"] else ""),
        f"Produced by `{report['command']}`. Both policies measured in one run, in "
        f"{settings['rounds']} round(s) with the policies' order alternating; quote the ratios. "
        f"In process: the service's encoder ({settings['threads']} thread(s) on "
        f"{report['machine']['encoder_runtime']}) behind one encoder queue per policy (max "
        f"{settings['max_batch']} texts a batch, {settings['batch_tokens']} padded tokens, "
        f"window {settings['window']}, no wait for a batch to fill), {settings['callers']} "
        "closed-loop asyncio callers in the same process, no HTTP.",
        f"Texts: {data['short']['texts']} CLINC-150 utterances (tokens "
        f"{data['short']['tokens']}) and {data['paragraph']['texts']} paragraphs of Wikipedia "
        f"sentences (tokens {data['paragraph']['tokens']}); "
        f"{100 * settings['paragraph_share']:.0f}% of requests send paragraphs. `single`: one "
        f"text a request; `multi`: {settings['multi_texts'][0]}–{settings['multi_texts'][1]} "
        "texts of one kind a request. Padding = padded tokens the encoder ran that were not "
        "text ÷ all it ran. Latency per request, by its texts' kind.",
    ]
    for workload in report["cells"]:
        ratio = report["ratios"][workload]
        sections.append(f"## `{workload}`\n\n" + results_table(report, workload))
        sections.append(
            f"Length-aware ÷ FIFO: texts/s {_cell(ratio['throughput'], '×')} "
            f"(per round: {', '.join(f'{r:.2f}' for r in ratio['throughput_per_round'])}); "
            f"short p99 {_cell(ratio['short_p99'], '×')}, paragraph p99 "
            f"{_cell(ratio['paragraph_p99'], '×')}."
        )
    sections += [
        "## Targets\n\n" + targets_table(report["targets"]),
        "## Machine\n\n" + bullet_list(report["machine"]),
        "## Rounds\n\n"
        + "\n".join(
            f"- round {number}: {', '.join(entry['order'])}; load average after "
            f"{entry['load_average_1_5_15_min']}"
            for number, entry in enumerate(report["rounds"], 1)
        ),
        "## Settings\n\n" + bullet_list(settings),
    ]
    return "\n\n".join(sections)


def plot(report: dict, path: Path) -> None:
    workloads = list(report["cells"])
    figure = Figure(figsize=(14, 4.6))
    rate_axes, padding_axes, latency_axes = figure.subplots(1, 3)
    positions = np.arange(len(workloads))
    for offset, policy in zip((-0.2, 0.2), POLICIES, strict=True):
        cells = [report["cells"][workload][policy] for workload in workloads]
        rate_axes.bar(positions + offset, [c["texts_per_s"] for c in cells], 0.4, label=policy)
        padding_axes.bar(
            positions + offset,
            [100 * (c["padded_token_share"] or 0.0) for c in cells],
            0.4,
            label=policy,
        )
    for axes, label, title in (
        (rate_axes, "texts / s", "Throughput (higher is better)"),
        (padding_axes, "% of padded tokens", "Padding (lower is better)"),
    ):
        axes.set_xticks(positions)
        axes.set_xticklabels(workloads)
        axes.set_ylabel(label)
        axes.set_title(title)
        axes.legend()
    groups = [(workload, kind) for workload in workloads for kind in CLASSES]
    group_positions = np.arange(len(groups))
    for offset, policy in zip((-0.2, 0.2), POLICIES, strict=True):
        p99 = [report["cells"][w][policy]["latency"][k]["p99_ms"] or 0.0 for w, k in groups]
        latency_axes.bar(group_positions + offset, p99, 0.4, label=policy)
    latency_axes.set_xticks(group_positions)
    latency_axes.set_xticklabels([f"{w}\n{k}" for w, k in groups], fontsize=8)
    latency_axes.set_ylabel("ms")
    latency_axes.set_title("Request p99 by text length (lower is better)")
    latency_axes.legend()
    figure.suptitle(
        f"Encoder queue policies on {report['machine']['cpu_model']}, "
        f"{report['settings']['threads']} encoder thread(s) on "
        f"{report['machine']['encoder_runtime']}, "
        f"{report['settings']['callers']} callers"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)


# -- run --------------------------------------------------------------------------------------


def _token_counts(encoder: OnnxEncoder, texts: list[str]) -> dict[str, float | int]:
    counts = np.array([len(ids) for ids in encoder.token_ids(texts)])
    return {
        "mean": round(float(counts.mean()), 1),
        "min": int(counts.min()),
        "max": int(counts.max()),
    }


def run(settings: Settings, progress: Progress) -> dict:
    manifest = load_bundle(settings.bundle)
    encoder = OnnxEncoder(
        settings.bundle, manifest, settings.threads, batch_tokens=settings.batch_tokens
    )
    clinc = load_dataset("clinc150", max_train=settings.short_texts, max_test=1, seed=settings.seed)
    texts = Texts(
        short=list(clinc.train.texts),
        paragraph=paragraphs(data_dir(), settings.paragraph_texts, settings.seed),
    )
    progress(f"{len(texts.short)} short texts, {len(texts.paragraph)} paragraphs")
    tallies, rounds = asyncio.run(measure(encoder, texts, settings, progress))
    cells = {
        workload: {policy: cell_report(tally) for policy, tally in by_policy.items()}
        for workload, by_policy in tallies.items()
    }
    ratios = {workload: comparison(by_policy) for workload, by_policy in cells.items()}
    return {
        "machine": {
            "encoder_threads": settings.threads,
            "encoder_runtime": encoder.runtime,
            "encoder_providers": encoder.providers,
            "tokenizers": tokenizers.__version__,
        },
        "bundle": {"path": str(settings.bundle), "name": manifest.name},
        "data": {
            "short": {
                "source": "CLINC-150 training utterances",
                "texts": len(texts.short),
                "tokens": _token_counts(encoder, texts.short),
            },
            "paragraph": {
                "source": "benchmarks.harness.paragraphs (CLINC-150 Wikipedia sentences)",
                "texts": len(texts.paragraph),
                "tokens": _token_counts(encoder, texts.paragraph),
            },
        },
        "settings": asdict(settings),
        "cells": cells,
        "ratios": ratios,
        "rounds": rounds,
        "targets": targets(ratios, settings),
    }
