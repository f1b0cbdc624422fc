"""Encoder throughput, single-text latency and the quality cost of ONNX Runtime variants.

    python -m benchmarks encoder_throughput                        # full run, about 5 min
    python -m benchmarks encoder_throughput --smoke --out DIR      # tiny, well under a minute

Every encoder reads the same CLINC-150 texts in one run:

- ``st_torch_fp32``: sentence-transformers on PyTorch (fp32) with the raw all-MiniLM-L6-v2, i.e.
  the 384-d backbone embedding (mean pooling + L2 normalisation);
- ``ort_fp32``: the service's :class:`service.encoder.OnnxEncoder` on the bundle's
  ``encoder.onnx`` as the service runs it (its session asks for ``ORT_ENABLE_ALL``, which is also
  ONNX Runtime's default level);
- ``ort_fp32_fused``: the same session on a graph fused offline by ONNX Runtime's transformer
  optimiser (see :mod:`benchmarks.harness.encoder_variants`);
- ``ort_int8_*``: the same session on dynamically quantised graphs.

The ONNX graphs compute the backbone *and* the V5 projection (384 → 256, one small matmul per
text), so they do slightly more work than sentence-transformers, not less.

Timing is round-robin (every batch, or every single text, goes through every encoder before the
next one), so a change of the machine's load hits all encoders alike; ratios from one run are the
numbers to quote. Quality: cosine of each ONNX variant's 256-d vectors with the fp32 ones, and
CLINC-150 k-NN accuracy (k=5, cosine) at 64-d (domain) and 256-d (intent).

Writes ``encoder_throughput[_smoke].{json,md,png}`` under ``--out`` (default
``benchmarks/results``).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import sentence_transformers
import tokenizers
import torch
from matplotlib.figure import Figure
from sentence_transformers import SentenceTransformer

from benchmarks.harness.encoder_variants import QUANTISATIONS, fused_variant, quantised_variant
from benchmarks.harness.markdown import bullet_list, markdown_table
from benchmarks.harness.runner import DEFAULT_BUNDLE, Progress, bundle_folder, option
from bundle import load_bundle
from service.encoder import OnnxEncoder
from training.data.registry import load_dataset
from training.evaluation.knn import knn_accuracy_table
from training.frozen_encoder import default_model_dir
from training.quantize import row_cosines

TORCH = "st_torch_fp32"
FP32 = "ort_fp32"
FUSED = "ort_fp32_fused"
QUALITY_BATCH = 128

Encode = Callable[[Sequence[str]], np.ndarray]
"""Texts → one embedding row per text."""


@dataclass(frozen=True)
class Settings:
    """Everything the run depends on; the smoke settings only shrink the counts."""

    bundle: Path = option(DEFAULT_BUNDLE, "V5 bundle folder", parse=bundle_folder)
    threads: int = option(1, "torch and ONNX Runtime intra-op threads")
    fused: bool = True
    """Also time the graph fused offline by ONNX Runtime's transformer optimiser."""
    batch_sizes: tuple[int, ...] = (32, 128)
    throughput_texts: int = 768
    throughput_rounds: int = 2
    latency_texts: int = 200
    knn_train: int = 4000
    knn_test: int = 1000
    knn_prefixes: tuple[int, int] = (64, 256)
    """Domain k-NN accuracy at the first prefix, intent k-NN accuracy at the second."""
    k: int = 5
    seed: int = 42
    target_speedup: float = 3.0
    """Throughput over sentence-transformers', at every batch size."""
    target_p50_ms: float = 5.0
    target_knn_cost_points: float = 0.5
    """The largest k-NN accuracy drop (points) an int8 variant may cost."""


SMOKE = Settings(
    fused=False, throughput_texts=64, throughput_rounds=1, latency_texts=8, knn_train=200,
    knn_test=40,
)
"""The smoke run skips the fused graph: the transformer optimiser alone takes seconds."""


# -- encoders ---------------------------------------------------------------------------------


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


def onnx_encoder(folder: Path, bundle_dir: Path, threads: int) -> Encode:
    """The service's encoder on ``folder``'s graph (the bundle's manifest describes it)."""
    encoder = OnnxEncoder(folder, load_bundle(bundle_dir), threads)
    return lambda texts: encoder.encode(texts).vectors


def build_encoders(
    bundle_dir: Path, work: Path, threads: int, fused: bool
) -> tuple[dict[str, Encode], dict[str, str]]:
    """Every encoder of the comparison (``fused``: with the offline-fused graph), and how each
    was made."""
    recipes = {
        TORCH: "sentence-transformers, raw all-MiniLM-L6-v2, PyTorch fp32",
        FP32: "the bundle's encoder.onnx, unchanged (fp32)",
    }
    if fused:
        fusions = fused_variant(bundle_dir, work / FUSED)
        recipes[FUSED] = f"transformer optimiser (model_type=bert, fp32); fusions: {fusions}"
    for name, recipe in QUANTISATIONS.items():
        quantised_variant(bundle_dir, work / name, recipe)
        recipes[name] = f"quantize_dynamic of encoder.onnx: {recipe.describe()}"
    encoders = {
        TORCH: sentence_transformers_encoder(threads),
        FP32: onnx_encoder(bundle_dir, bundle_dir, threads),
    }
    for name in list(recipes)[2:]:
        encoders[name] = onnx_encoder(work / name, bundle_dir, threads)
    return encoders, recipes


# -- timing -----------------------------------------------------------------------------------


def throughput(
    encoders: Mapping[str, Encode], texts: Sequence[str], batch_size: int, rounds: int
) -> dict[str, float]:
    """Texts per second of each encoder over ``texts`` in batches of ``batch_size``.

    Each batch goes through every encoder in turn (after one untimed warm-up batch each); the
    rate uses each encoder's median total time over ``rounds`` passes.
    """
    batches = [texts[start : start + batch_size] for start in range(0, len(texts), batch_size)]
    for encode in encoders.values():
        encode(batches[0])
    totals: dict[str, list[float]] = {name: [] for name in encoders}
    for _ in range(rounds):
        spent = dict.fromkeys(encoders, 0.0)
        for batch in batches:
            for name, encode in encoders.items():
                start = time.perf_counter()
                encode(batch)
                spent[name] += time.perf_counter() - start
        for name, seconds in spent.items():
            totals[name].append(seconds)
    return {name: len(texts) / float(np.median(times)) for name, times in totals.items()}


def single_text_latency(
    encoders: Mapping[str, Encode], texts: Sequence[str]
) -> dict[str, dict[str, float]]:
    """p50/p99/mean milliseconds of one call with one text, each text through every encoder."""
    for encode in encoders.values():
        for text in texts[:3]:
            encode([text])
    timings: dict[str, list[float]] = {name: [] for name in encoders}
    for text in texts:
        for name, encode in encoders.items():
            start = time.perf_counter_ns()
            encode([text])
            timings[name].append((time.perf_counter_ns() - start) / 1e6)
    return {
        name: {
            "p50_ms": float(np.percentile(values, 50)),
            "p99_ms": float(np.percentile(values, 99)),
            "mean_ms": float(np.mean(values)),
        }
        for name, values in timings.items()
    }


# -- quality ----------------------------------------------------------------------------------


def encode_all(encode: Encode, texts: Sequence[str]) -> np.ndarray:
    """All ``texts`` in batches of :data:`QUALITY_BATCH`, stacked."""
    parts = [
        encode(texts[start : start + QUALITY_BATCH])
        for start in range(0, len(texts), QUALITY_BATCH)
    ]
    return np.concatenate(parts).astype(np.float32)


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


# -- targets and report -----------------------------------------------------------------------


def targets(report: dict, settings: Settings) -> list[dict]:
    """Each target, per ONNX encoder it applies to: the number, the bar, met or missed."""
    rows = []
    for batch_size in settings.batch_sizes:
        rates = report["throughput_texts_per_s"][str(batch_size)]
        for name in report["quality"]:
            ratio = rates[name] / rates[TORCH]
            rows.append(
                {
                    "target": f"throughput ≥ {settings.target_speedup:g}× sentence-transformers, "
                    f"batch {batch_size}",
                    "encoder": name,
                    "reached": f"{ratio:.2f}×",
                    "met": ratio >= settings.target_speedup,
                }
            )
    for name in report["quality"]:
        p50 = report["single_text_latency"][name]["p50_ms"]
        rows.append(
            {
                "target": f"single short text p50 ≤ {settings.target_p50_ms:g} ms",
                "encoder": name,
                "reached": f"{p50:.2f} ms",
                "met": p50 <= settings.target_p50_ms,
            }
        )
    for name, row in report["quality"].items():
        if name.startswith("ort_int8"):
            rows.append(
                {
                    "target": f"int8 k-NN cost ≤ {settings.target_knn_cost_points:g} points",
                    "encoder": name,
                    "reached": f"{row['knn_cost_points']:.2f} pt",
                    "met": row["knn_cost_points"] <= settings.target_knn_cost_points,
                }
            )
    return rows


def speed_table(report: dict) -> str:
    sizes = list(report["throughput_texts_per_s"])
    headers = ["encoder"]
    for size in sizes:
        headers += [f"texts/s @ {size}", f"× ST @ {size}"]
    headers += ["1 text p50 ms", "1 text p99 ms", "p50 × ST"]
    rows = []
    for name in report["encoders"]:
        cells: list[object] = [f"`{name}`"]
        for size in sizes:
            rates = report["throughput_texts_per_s"][size]
            cells += [f"{rates[name]:.0f}", f"{rates[name] / rates[TORCH]:.2f}"]
        latency = report["single_text_latency"]
        torch_p50 = latency[TORCH]["p50_ms"]
        cells += [
            f"{latency[name]['p50_ms']:.2f}",
            f"{latency[name]['p99_ms']:.2f}",
            f"{torch_p50 / latency[name]['p50_ms']:.2f}",
        ]
        rows.append(cells)
    return markdown_table(headers, rows)


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


def markdown(report: dict) -> str:
    settings = report["settings"]
    target_rows = [
        [row["target"], f"`{row['encoder']}`", row["reached"], "met" if row["met"] else "MISSED"]
        for row in report["targets"]
    ]
    recipes = "\n".join(f"- `{name}`: {text}" for name, text in report["encoders"].items())
    return "\n\n".join(
        [
            "# Encoder throughput and quantisation" + (" (smoke run)" if report["smoke"] else ""),
            f"Produced by `{report['command']}`. All encoders measured in one run, round-robin "
            "(each batch or text through every encoder in turn): quote the ratios, not the "
            "absolute rates, on this shared machine.",
            "## Encoders\n\n" + recipes,
            "`st_torch_fp32` computes the raw 384-d MiniLM embedding; the ONNX graphs compute "
            "the same backbone plus the V5 projection to 256-d (one 384×256 matmul per text, a "
            "negligible share of the six transformer layers), so the comparison is not tilted "
            "towards ONNX.",
            f"Threads: {report['machine']['torch_threads']} torch thread and "
            f"{report['machine']['ort_intra_op_threads']} ONNX Runtime intra-op thread per "
            "encoder. The 2 cores are shared with other work (see the load averages below); "
            "there, two spinning threads per library get descheduled at every barrier, which "
            "made PyTorch's single-text latency jump by an order of magnitude in trials, so one "
            "thread each is the fair, stable setting. `ort_fp32`'s session already uses "
            "`ORT_ENABLE_ALL` (also ONNX Runtime's default level): the online optimisation is "
            "the same for every ONNX variant, and `ort_fp32_fused` adds the offline fusions.",
            "## Speed\n\n" + speed_table(report),
            f"Throughput: {report['data']['throughput_texts']} texts, median of "
            f"{settings['throughput_rounds']} round(s). Latency: {report['data']['latency_texts']} "
            f"CLINC-150 test utterances one at a time (tokens per text: "
            f"{report['data']['latency_tokens']}).",
            "## Quality of the ONNX variants\n\n" + quality_table(report),
            f"Cosines: each variant's vectors against `{FP32}`'s on the "
            f"{report['data']['knn_test']} test texts (full 256-d and the 64-d prefix). k-NN: "
            f"k={settings['k']}, cosine, {report['data']['knn_train']} training → "
            f"{report['data']['knn_test']} test texts; domain at {settings['knn_prefixes'][0]}-d, "
            f"intent at {settings['knn_prefixes'][1]}-d. Cost = the larger accuracy drop from "
            f"`{FP32}`, in points.",
            "## Targets\n\n"
            + markdown_table(["target", "encoder", "reached", "verdict"], target_rows),
            "## Machine and settings\n\n" + bullet_list(report["machine"]),
            bullet_list(settings),
        ]
    )


def plot(report: dict, path: Path) -> None:
    names = list(report["encoders"])
    figure = Figure(figsize=(13, 4.8))
    left, right = figure.subplots(1, 2)
    width = 0.8 / len(report["throughput_texts_per_s"])
    positions = np.arange(len(names))
    for offset, (size, rates) in enumerate(report["throughput_texts_per_s"].items()):
        left.bar(
            positions + offset * width, [rates[n] for n in names], width, label=f"batch {size}"
        )
    left.set_xticks(positions + width * (len(report["throughput_texts_per_s"]) - 1) / 2)
    left.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    left.set_ylabel("texts / s")
    left.set_title("Throughput (higher is better)")
    left.legend()
    latency = report["single_text_latency"]
    right.bar(positions - 0.2, [latency[n]["p50_ms"] for n in names], 0.4, label="p50")
    right.bar(positions + 0.2, [latency[n]["p99_ms"] for n in names], 0.4, label="p99")
    right.axhline(report["settings"]["target_p50_ms"], color="grey", linestyle="--", lw=1)
    right.set_xticks(positions)
    right.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    right.set_ylabel("ms")
    right.set_title("One short text per call (lower is better)")
    right.legend()
    figure.suptitle(
        f"Encoders on {report['machine']['cpu_model']}, {report['settings']['threads']} threads"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)


# -- run --------------------------------------------------------------------------------------


def run(settings: Settings, progress: Progress) -> dict:
    bundle_dir = settings.bundle
    machine = {
        "tokenizers": tokenizers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "torch_threads": settings.threads,
        "ort_intra_op_threads": settings.threads,
        "ort_inter_op_threads": 1,
        "ort_graph_optimization_level": "ORT_ENABLE_ALL (the service's session)",
    }

    data = load_dataset(
        "clinc150", max_train=settings.knn_train, max_test=settings.knn_test, seed=settings.seed
    )
    with tempfile.TemporaryDirectory() as work:
        progress("building the ONNX variants")
        encoders, recipes = build_encoders(bundle_dir, Path(work), settings.threads, settings.fused)
        throughput_texts = list(data.train.texts[: settings.throughput_texts])
        latency_texts = list(data.test.texts[: settings.latency_texts])
        rates = {}
        for size in settings.batch_sizes:
            progress(f"throughput, batch {size}")
            rates[str(size)] = throughput(
                encoders, throughput_texts, size, settings.throughput_rounds
            )
        progress("single-text latency")
        latency = single_text_latency(encoders, latency_texts)
        progress("quality of the ONNX variants")
        onnx_encoders = {name: encode for name, encode in encoders.items() if name != TORCH}
        scores = quality(onnx_encoders, data, settings)
    tokenizer = OnnxEncoder(bundle_dir, load_bundle(bundle_dir), 1).tokenizer
    tokens = [len(tokenizer.encode(text).ids) for text in latency_texts]
    report = {
        "machine": machine,
        "bundle": str(bundle_dir),
        "data": {
            "dataset": "clinc150",
            "throughput_texts": len(throughput_texts),
            "latency_texts": len(latency_texts),
            "latency_tokens": {
                "mean": round(float(np.mean(tokens)), 1),
                "max": int(np.max(tokens)),
            },
            "knn_train": len(data.train),
            "knn_test": len(data.test),
        },
        "settings": asdict(settings),
        "encoders": recipes,
        "throughput_texts_per_s": rates,
        "single_text_latency": latency,
        "quality": scores,
    }
    return report | {"targets": targets(report, settings)}
