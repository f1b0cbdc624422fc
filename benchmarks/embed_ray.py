"""Bulk embedding on Ray Data against the single-machine worker processes, side by side.

    python -m benchmarks embed_ray                     # 20,000 texts, 3 rounds, a few minutes
    python -m benchmarks embed_ray --smoke --bundle B --out DIR    # tiny, for CI

Both paths run :func:`bulk.embed.embed_corpus` on the same corpus, with the same bundle and
options, into a fresh folder each time: ``fractal embed`` (``--workers`` worker processes, one
ONNX Runtime thread each) and ``fractal embed --ray`` (:class:`bulk.ray_embed.RayEncoders`: as
many Ray Data actors, one thread each, on a local Ray cluster of ``--workers`` CPUs).

- **Corpus**: CLINC-150's utterances (the training then the test split, out-of-scope excluded,
  as :func:`training.data.registry.load_dataset` reads them), cycled to ``--documents`` texts and
  written as a JSONL file (``id``, ``text``, ``metadata``: domain and intent), which the paths
  read with :mod:`bulk.corpus` as any user's corpus.
- **Timing**: one embedding is the wall time of ``embed_corpus`` from call to return: reading,
  tokenising, encoding, checking and writing the shards, with the start of the worker pool or
  of the shard's Ray actors included (and, for the first Ray run, copying the bundle to the
  node). The local Ray cluster is started once before the rounds, as a cluster one connects to
  is already running; its start is reported apart, with the ratio it would give if it were
  counted in one run. A round embeds with both paths, in alternating order (local first in
  even rounds), so that a change of the machine's load hits both alike; each path's rate is
  ``documents / median seconds`` over the rounds.
- **Identity**: every run's shard files and ``embed.json`` are compared byte for byte with the
  first local run's.

Target (issue 17): on the 2-core box, the Ray path's throughput with a local 2-CPU cluster is at
least 0.8 × the single-machine path's. Writes ``embed_ray[_smoke].{json,md,png}`` under ``--out``
(default ``benchmarks/results``).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from functools import partial
from importlib import metadata
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from tokenizers import Tokenizer

from benchmarks.harness.clinc_documents import labelled_documents
from benchmarks.harness.machine import load_average
from benchmarks.harness.markdown import bullet_list, markdown_table, targets_table
from benchmarks.harness.runner import DEFAULT_BUNDLE, Progress, bundle_folder, option
from bulk.embed import DEFAULT_BATCH_TOKENS, DEFAULT_SHARD_ROWS, EmbedOptions, embed_corpus
from bulk.ray_embed import LOCAL, RayEncoders, cluster
from bundle import TOKENIZER_FILE
from training.data.registry import load_dataset

PATHS = ("local", "ray")
LABELS = {"local": "worker processes", "ray": "Ray Data, local cluster"}


@dataclass(frozen=True)
class Settings:
    """Everything the run depends on; the smoke settings only shrink the counts."""

    bundle: Path = option(DEFAULT_BUNDLE, "bundle folder", parse=bundle_folder)
    documents: int = option(20_000, "texts in the corpus")
    workers: int = option(2, "worker processes; the Ray cluster's CPUs and actors")
    rounds: int = option(3, "rounds, each embedding with both paths")
    dtype: str = option("float32", "vector dtype of the shards (float32: bit-for-bit check)")
    shard_size: int = option(DEFAULT_SHARD_ROWS, "documents per shard")
    batch_tokens: int = DEFAULT_BATCH_TOKENS
    target_ratio: float = 0.8
    """The Ray path's texts/s over the worker processes'."""


SMOKE = Settings(documents=300, rounds=1, shard_size=200)


def write_corpus(path: Path, documents: int) -> dict:
    """CLINC-150's utterances cycled to ``documents`` JSONL records; what the corpus is."""
    data = load_dataset("clinc150", max_train=None, max_test=None)
    base = [
        document
        for split in (data.train, data.test)
        for document in labelled_documents(split, {"domain": 0, "intent": 1})
    ]
    with path.open("w", encoding="utf-8") as handle:
        for number in range(documents):
            document = base[number % len(base)]
            row = {"id": f"c{number}", "text": document["text"], "metadata": document["metadata"]}
            handle.write(json.dumps(row) + "\n")
    return {
        "source": "CLINC-150 train and test utterances, out-of-scope excluded, cycled",
        "distinct_texts": min(len(base), documents),
        "documents": documents,
    }


def token_counts(bundle_dir: Path, corpus: Path) -> dict:
    """Tokens per text (special tokens included), as the encoder reads them."""
    tokenizer = Tokenizer.from_file(str(bundle_dir / TOKENIZER_FILE))
    tokenizer.no_padding()
    texts = [json.loads(line)["text"] for line in corpus.read_text("utf-8").splitlines()]
    counts = np.array([len(e.ids) for e in tokenizer.encode_batch(texts)])
    return {"mean": round(float(counts.mean()), 1), "max": int(counts.max())}


def output_files(out: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(out.iterdir())}


def embed_once(path: str, corpus: Path, out: Path, settings: Settings, node: Path) -> float:
    """Seconds one ``embed_corpus`` call of ``path`` takes."""
    options = EmbedOptions(
        dtype=settings.dtype,
        workers=settings.workers,
        shard_size=settings.shard_size,
        batch_tokens=settings.batch_tokens,
        progress=False,
    )
    encoders = None
    if path == "ray":
        encoders = partial(
            RayEncoders,
            actors=settings.workers,
            cache_root=node,
            batch_tokens=settings.batch_tokens,
        )
    start = time.perf_counter()
    embed_corpus(corpus, settings.bundle, out, options, encoders)
    return time.perf_counter() - start


def targets(report: dict, settings: Settings) -> list[dict]:
    ratio = report["ratio_ray_over_local"]
    return [
        {
            "target": f"Ray (local {settings.workers}-CPU cluster) ≥ {settings.target_ratio:g}× "
            f"the single-machine path's texts/s ({settings.workers} workers)",
            "reached": f"{ratio:.2f}×",
            "met": ratio >= settings.target_ratio,
        },
        {
            "target": "the Ray path's shards and embed.json equal the single-machine path's, "
            "byte for byte",
            "reached": "identical" if report["identical"] else "different",
            "met": report["identical"],
        },
    ]


def run(settings: Settings, progress: Progress) -> dict:
    with tempfile.TemporaryDirectory(prefix="embed-ray-") as folder:
        work = Path(folder)
        corpus = work / "corpus.jsonl"
        progress(f"writing {settings.documents:,} documents")
        data = write_corpus(corpus, settings.documents)
        data["tokens_per_text"] = token_counts(settings.bundle, corpus)
        progress(f"starting a local Ray cluster of {settings.workers} CPUs")
        started = time.perf_counter()
        with cluster(LOCAL, cpus=settings.workers):
            cluster_start_s = time.perf_counter() - started
            runs: list[dict] = []
            reference: dict[str, bytes] | None = None
            identical = True
            for number in range(settings.rounds):
                order = PATHS if number % 2 == 0 else PATHS[::-1]
                for path in order:
                    out = work / f"{path}-{number}"
                    seconds = embed_once(path, corpus, out, settings, work / "node")
                    files = output_files(out)
                    reference = files if reference is None else reference
                    identical &= files == reference
                    rate = settings.documents / seconds
                    runs.append(
                        {
                            "round": number,
                            "path": path,
                            "seconds": round(seconds, 3),
                            "texts_per_s": round(rate, 1),
                            "shards": sum(name.endswith(".parquet") for name in files),
                            "load_average_1_5_15_min": load_average(),
                        }
                    )
                    progress(f"round {number}, {path}: {seconds:.1f} s, {rate:.0f} texts/s")
            stopping = time.perf_counter()
        cluster_stop_s = time.perf_counter() - stopping
    seconds = {
        path: statistics.median(r["seconds"] for r in runs if r["path"] == path) for path in PATHS
    }
    rates = {path: settings.documents / seconds[path] for path in PATHS}
    with_start = settings.documents / (seconds["ray"] + cluster_start_s)
    report = {
        "machine": {
            "ray": metadata.version("ray"),
            "pyarrow": metadata.version("pyarrow"),
            "ort_intra_op_threads_per_worker": 1,
        },
        "bundle": str(settings.bundle),
        "data": data,
        "settings": asdict(settings),
        "runs": runs,
        "median_seconds": {path: round(value, 3) for path, value in seconds.items()},
        "texts_per_s": {path: round(rate, 1) for path, rate in rates.items()},
        "ratio_ray_over_local": round(rates["ray"] / rates["local"], 3),
        "ray_cluster_start_s": round(cluster_start_s, 2),
        "ray_cluster_stop_s": round(cluster_stop_s, 2),
        "ratio_with_cluster_start": round(with_start / rates["local"], 3),
        "identical": identical,
    }
    return report | {"targets": targets(report, settings)}


def markdown(report: dict) -> str:
    settings = report["settings"]
    rates, seconds = report["texts_per_s"], report["median_seconds"]
    speed_rows = [
        [
            f"`{path}` ({LABELS[path]})",
            f"{seconds[path]:.2f}",
            f"{rates[path]:,.0f}",
            f"{rates[path] / rates['local']:.2f}×",
        ]
        for path in PATHS
    ]
    run_rows = [
        [r["round"], f"`{r['path']}`", f"{r['seconds']:.2f}", f"{r['texts_per_s']:,.0f}",
         r["shards"], r["load_average_1_5_15_min"]]
        for r in report["runs"]
    ]  # fmt: skip
    data = report["data"]
    return "\n\n".join(
        [
            "# Bulk embedding on Ray Data vs worker processes"
            + (" (smoke run)" if report["smoke"] else ""),
            f"`{report['command']}` — {report['machine']['cpu_model']}, "
            f"{report['machine']['cpu_cores']} cores, load average at start "
            f"{report['machine']['load_average_1_5_15_min_at_start']}, at end "
            f"{report['machine']['load_average_1_5_15_min_at_end']}.",
            f"{data['documents']:,} documents ({data['source']}: {data['distinct_texts']:,} "
            f"distinct texts of {data['tokens_per_text']['mean']} tokens on average, at most "
            f"{data['tokens_per_text']['max']}), bundle "
            f"`{report['bundle']}`, `--dtype {settings['dtype']}`, `--shard-size "
            f"{settings['shard_size']}`, `--batch-tokens {settings['batch_tokens']}`. "
            f"`local`: {settings['workers']} worker processes; `ray`: {settings['workers']} "
            f"Ray Data actors on a local cluster of {settings['workers']} CPUs. One ONNX Runtime "
            "thread per worker or actor.",
            "## Throughput\n\n"
            + markdown_table(["path", "median s", "texts/s", "× local"], speed_rows),
            f"Median of {settings['rounds']} round(s), each path once a round, in alternating "
            "order. A run is one `embed_corpus` call (read, tokenise, encode, check, write the "
            "shards; the worker pool's or the Ray actors' start included). The local Ray "
            f"cluster started once before the rounds in {report['ray_cluster_start_s']:.1f} s "
            f"(stopped in {report['ray_cluster_stop_s']:.1f} s); counted in one Ray run, the "
            f"ratio would be {report['ratio_with_cluster_start']:.2f}×. Outputs byte for byte "
            f"identical across every run: **{'yes' if report['identical'] else 'NO'}**.",
            "## Runs\n\n"
            + markdown_table(
                ["round", "path", "seconds", "texts/s", "shards", "load average (1, 5, 15 min)"],
                run_rows,
            ),
            "## Targets\n\n" + targets_table(report["targets"]),
            "## Machine and settings\n\n" + bullet_list(report["machine"]),
            bullet_list(settings),
        ]
    )


def plot(report: dict, path: Path) -> None:
    figure = Figure(figsize=(9, 4.5))
    axes = figure.subplots()
    rounds = sorted({r["round"] for r in report["runs"]})
    width = 0.8 / len(PATHS)
    for offset, name in enumerate(PATHS):
        values = [
            next(r["texts_per_s"] for r in report["runs"] if r["round"] == n and r["path"] == name)
            for n in rounds
        ]
        positions = np.arange(len(rounds)) + offset * width
        axes.bar(positions, values, width, label=f"{name} ({LABELS[name]})")
        axes.axhline(report["texts_per_s"][name], color=f"C{offset}", linestyle="--", lw=1)
    axes.set_xticks(np.arange(len(rounds)) + width * (len(PATHS) - 1) / 2)
    axes.set_xticklabels([f"round {n}" for n in rounds])
    axes.set_ylabel("texts / s (dashed: median)")
    axes.set_title(
        f"{report['data']['documents']:,} texts, {report['settings']['workers']} workers / "
        f"actors: Ray {report['ratio_ray_over_local']:.2f}× local"
    )
    axes.legend(loc="lower right")
    figure.suptitle(f"fractal embed on {report['machine']['cpu_model']}")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
