"""``fractal embed`` of paragraphs with the fp32 bundle and with its fast twin, side by side.

    python -m benchmarks bulk_embed --twin runs/clinc150/bundle-int8    # 100,000 paragraphs
    python -m benchmarks bulk_embed --smoke --bundle B --twin T --out DIR    # tiny, for CI

- **Corpus**: paragraphs of 40–60 tokens (:mod:`benchmarks.harness.paragraphs`), written as a
  JSONL file (``id``, ``text``) that both runs read with :mod:`bulk.corpus`, as any user's
  corpus.
- **Runs**: :func:`bulk.embed.embed_corpus` with the same options (``--workers`` processes, one
  encoder thread each) into a fresh folder, once with the fp32 bundle and the token budget that
  was the default then (what ``fractal embed`` did before issue 19), once with the twin and the
  default budget now (on the runtime its manifest names, as ``FRACTAL_ENCODER_RUNTIME=auto``
  picks). Rounds alternate the order, so a
  change of the machine's load hits both alike; a rate is ``documents / median seconds``, the
  whole call timed (read, tokenise, encode, check, write, the worker pool's start).
- **Quality**: the cosine of each twin vector with the fp32 vector of the same document, from
  the shards.

Target (issue 19): the twin's documents/s at least 2.5× the fp32 bundle's. Writes
``bulk_embed[_smoke].{json,md,png}`` under ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from tokenizers import Tokenizer

from benchmarks.harness.machine import load_average
from benchmarks.harness.markdown import bullet_list, markdown_table, targets_table
from benchmarks.harness.paragraphs import paragraphs
from benchmarks.harness.runner import DEFAULT_BUNDLE, Progress, bundle_folder, option
from bulk.embed import DEFAULT_BATCH_TOKENS, DEFAULT_SHARD_ROWS, EmbedOptions, embed_corpus
from bulk.shards import read_shard
from bundle import TOKENIZER_FILE, load_bundle
from encoding.encoder import chosen_runtime
from training.data.registry import data_dir
from training.quantize import row_cosines

ENCODERS = ("fp32", "twin")


@dataclass(frozen=True)
class Settings:
    """Everything the run depends on; the smoke settings only shrink the counts."""

    bundle: Path = option(DEFAULT_BUNDLE, "the fp32 bundle", parse=bundle_folder)
    twin: Path = option(
        Path(f"{DEFAULT_BUNDLE}-int8"), "its fast twin (fractal run / fractal quantize)",
        parse=bundle_folder,
    )
    documents: int = option(100_000, "paragraphs in the corpus")
    workers: int = option(2, "worker processes (one encoder thread each)")
    rounds: int = option(1, "rounds, each embedding with both bundles")
    dtype: str = option("float16", "vector dtype of the shards (fractal embed's default)")
    shard_size: int = DEFAULT_SHARD_ROWS
    batch_tokens: int = DEFAULT_BATCH_TOKENS
    baseline_batch_tokens: int = 8192
    """The fp32 run's token budget: ``fractal embed``'s default before issue 19, so that the
    fp32 run is what the command did then."""
    seed: int = 0
    target_ratio: float = 2.5
    """The twin's documents/s over the fp32 bundle's."""


SMOKE = Settings(documents=200, shard_size=100)


def write_corpus(path: Path, settings: Settings) -> dict:
    """The paragraphs as JSONL records; their count and tokens per text."""
    texts = paragraphs(data_dir(), settings.documents, settings.seed)
    with path.open("w", encoding="utf-8") as handle:
        for number, text in enumerate(texts):
            handle.write(json.dumps({"id": f"p{number}", "text": text}) + "\n")
    tokenizer = Tokenizer.from_file(str(settings.bundle / TOKENIZER_FILE))
    tokenizer.no_padding()
    counts = np.array([len(e.ids) for e in tokenizer.encode_batch(texts)])
    return {
        "source": "CLINC-150 Wikipedia sentences joined into paragraphs "
        "(benchmarks/harness/paragraphs.py)",
        "documents": len(texts),
        "tokens_per_text": {
            "mean": round(float(counts.mean()), 1),
            "p5_p95": [int(v) for v in np.percentile(counts, [5, 95])],
            "max": int(counts.max()),
        },
    }


def embed_once(
    bundle: Path, corpus: Path, out: Path, settings: Settings, batch_tokens: int
) -> float:
    """Seconds one ``embed_corpus`` call with ``bundle`` takes."""
    options = EmbedOptions(
        dtype=settings.dtype,
        workers=settings.workers,
        shard_size=settings.shard_size,
        batch_tokens=batch_tokens,
        progress=False,
    )
    start = time.perf_counter()
    embed_corpus(corpus, bundle, out, options)
    return time.perf_counter() - start


def shard_vectors(out: Path, bundle: Path) -> np.ndarray:
    """Every vector of a run's shards, in shard order."""
    manifest = load_bundle(bundle)
    shards = sorted(out.glob("*.parquet"))
    return np.concatenate([read_shard(path, manifest).vectors for path in shards])


def targets(report: dict, settings: Settings) -> list[dict]:
    ratio = report["ratio_twin_over_fp32"]
    return [
        {
            "target": f"fractal embed with the fast twin ≥ {settings.target_ratio:g}× the fp32 "
            f"bundle's documents/s ({settings.documents:,} paragraphs)",
            "reached": f"{ratio:.2f}×",
            "met": ratio >= settings.target_ratio,
        }
    ]


def run(settings: Settings, progress: Progress) -> dict:
    bundles = {"fp32": settings.bundle, "twin": settings.twin}
    budgets = {"fp32": settings.baseline_batch_tokens, "twin": settings.batch_tokens}
    with tempfile.TemporaryDirectory(prefix="bulk-embed-") as folder:
        work = Path(folder)
        corpus = work / "corpus.jsonl"
        progress(f"writing {settings.documents:,} paragraphs")
        data = write_corpus(corpus, settings)
        runs: list[dict] = []
        for number in range(settings.rounds):
            order = ENCODERS if number % 2 == 0 else ENCODERS[::-1]
            for name in order:
                out = work / f"{name}-{number}"
                seconds = embed_once(bundles[name], corpus, out, settings, budgets[name])
                rate = settings.documents / seconds
                runs.append(
                    {
                        "round": number,
                        "encoder": name,
                        "seconds": round(seconds, 3),
                        "documents_per_s": round(rate, 1),
                        "load_average_1_5_15_min": load_average(),
                    }
                )
                progress(f"round {number}, {name}: {seconds:.1f} s, {rate:.0f} documents/s")
        cosines = row_cosines(
            shard_vectors(work / "twin-0", settings.twin),
            shard_vectors(work / "fp32-0", settings.bundle),
        )
    seconds = {
        name: statistics.median(r["seconds"] for r in runs if r["encoder"] == name)
        for name in ENCODERS
    }
    rates = {name: settings.documents / seconds[name] for name in ENCODERS}
    twin = load_bundle(settings.twin)
    report = {
        "machine": {"ort_or_openvino_threads_per_worker": 1},
        "bundles": {name: str(path) for name, path in bundles.items()},
        "twin_recipe": twin.quantization.to_json() if twin.quantization else None,
        "twin_runtime": chosen_runtime("auto", twin),
        "data": data,
        "settings": asdict(settings),
        "runs": runs,
        "median_seconds": {name: round(value, 3) for name, value in seconds.items()},
        "documents_per_s": {name: round(rate, 1) for name, rate in rates.items()},
        "ratio_twin_over_fp32": round(rates["twin"] / rates["fp32"], 3),
        "cosine_twin_to_fp32": {
            "mean": round(float(cosines.mean()), 5),
            "min": round(float(cosines.min()), 5),
        },
    }
    return report | {"targets": targets(report, settings)}


def markdown(report: dict) -> str:
    settings, data = report["settings"], report["data"]
    rates, seconds = report["documents_per_s"], report["median_seconds"]
    speed_rows = [
        [f"`{name}` (`{report['bundles'][name]}`)", f"{seconds[name]:.1f}",
         f"{rates[name]:,.0f}", f"{rates[name] / rates['fp32']:.2f}×"]
        for name in ENCODERS
    ]  # fmt: skip
    run_rows = [
        [r["round"], f"`{r['encoder']}`", f"{r['seconds']:.1f}", f"{r['documents_per_s']:,.0f}",
         r["load_average_1_5_15_min"]]
        for r in report["runs"]
    ]  # fmt: skip
    cosine = report["cosine_twin_to_fp32"]
    return "\n\n".join(
        [
            "# fractal embed: the fp32 bundle and its fast twin"
            + (" (smoke run)" if report["smoke"] else ""),
            f"`{report['command']}` — {report['machine']['cpu_model']}, "
            f"{report['machine']['cpu_cores']} cores, load average at start "
            f"{report['machine']['load_average_1_5_15_min_at_start']}, at end "
            f"{report['machine']['load_average_1_5_15_min_at_end']}.",
            f"{data['documents']:,} paragraphs ({data['source']}; "
            f"{data['tokens_per_text']['mean']} tokens on average, 5th–95th percentile "
            f"{data['tokens_per_text']['p5_p95']}, at most {data['tokens_per_text']['max']}), "
            f"`--workers {settings['workers']}` (one encoder thread each), `--dtype "
            f"{settings['dtype']}`; `--batch-tokens {settings['baseline_batch_tokens']}` for "
            f"fp32 (the default before issue 19), {settings['batch_tokens']} for the twin (the "
            f"default now). The twin runs on `{report['twin_runtime']}`; its recipe: "
            f"`{report['twin_recipe']}`.",
            "## Throughput\n\n"
            + markdown_table(["bundle", "median s", "documents/s", "× fp32"], speed_rows),
            f"Median of {settings['rounds']} round(s), each bundle once a round, in alternating "
            "order; one run is a whole `embed_corpus` call. Twin vectors against the fp32 "
            f"ones, document by document: mean cosine {cosine['mean']:.4f}, min "
            f"{cosine['min']:.4f}.",
            "## Runs\n\n"
            + markdown_table(
                ["round", "bundle", "seconds", "documents/s", "load average (1, 5, 15 min)"],
                run_rows,
            ),
            "## Targets\n\n" + targets_table(report["targets"]),
            "## Machine and settings\n\n" + bullet_list(report["machine"]),
            bullet_list(settings),
        ]
    )


def plot(report: dict, path: Path) -> None:
    figure = Figure(figsize=(7, 4.2))
    axes = figure.subplots()
    rates = report["documents_per_s"]
    axes.bar(list(ENCODERS), [rates[name] for name in ENCODERS], color=["C0", "C1"])
    for position, name in enumerate(ENCODERS):
        axes.annotate(f"{rates[name]:,.0f}", (position, rates[name]), ha="center", va="bottom")
    axes.set_ylabel("documents / s")
    axes.set_title(
        f"fractal embed, {report['data']['documents']:,} paragraphs: twin "
        f"{report['ratio_twin_over_fp32']:.2f}× fp32"
    )
    figure.suptitle(f"on {report['machine']['cpu_model']}, {report['settings']['workers']} workers")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
