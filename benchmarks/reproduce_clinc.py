"""Reproduce the Fractal Embeddings paper's CLINC-150 experiment end to end on a frozen encoder.

    python benchmarks/reproduce_clinc.py            # the full run: 5 seeds, ~10 minutes on 2 cores
    python benchmarks/reproduce_clinc.py --smoke    # CI smoke run: small subset, 2 seeds, 1 epoch

Trains V5, MRL and the three ablations of §5 (our recipe), V5 and MRL with the paper's recipe as
written, the 3-level hierarchy (Table 8) and a sweep of the discard weight; evaluates each beside
the raw encoder; writes ``benchmarks/results/clinc150_reproduction{,_smoke}.{json,md}`` and the
per-experiment reports (Markdown, JSON, PNG) under ``benchmarks/results/clinc150{,_smoke}/``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from training.evaluation.knn import knn_accuracy_table
from training.evaluation.report import RunResult, compare, summarise, write_report
from training.frozen_encoder import FrozenEncoder
from training.head_job import evaluate_head, evaluate_raw, train
from training.prepared_data import DataConfig, prepare_data
from training.train_config import PAPER_SEEDS, TrainConfig

RESULTS = Path(__file__).resolve().parent / "results"
PREFIX_DIMS = [64, 128, 192, 256]
ABLATIONS = ("inverted", "no-prefix", "uhmt")
PAPER_RECIPE = {"supcon_weight": 0.0, "discard_weight": 0.0}
DISCARD_SWEEP = (0.0, 1.0, 3.0, 5.0, 10.0)

# The paper's CLINC-150 numbers (BGE-small backbone): Tables 2, 3, 4, 7, 8.
PAPER = {
    "v5_s": "+0.150 ± 0.028 (Table 3); +0.053 ± 0.004 with a fixed split (Table 4)",
    "mrl_s": "+0.007 ± 0.016",
    "inverted_s": "−0.018 ± 0.005",
    "no-prefix_s": "+0.009 ± 0.005",
    "uhmt_s": "+0.001 ± 0.005",
    "v5_fine_256": "0.676 (baseline 384d: 0.887)",
    "mrl_fine_256": "0.704",
    "v5_recall_ramp": "+6.3 ± 0.9 pp (64d 87.1 → 256d 93.4)",
    "mrl_recall_ramp": "+0.6 ± 0.3 pp",
    "three_level_s02": "V5 +0.027 ± 0.005, MRL +0.002 ± 0.005",
}


def run_methods(data, methods: dict[str, TrainConfig], seeds, progress) -> list[RunResult]:
    runs = []
    for method, base in methods.items():
        for seed in seeds:
            result = train(data, replace(base, seed=seed), progress=progress)
            evaluation = evaluate_head(data, result.head, PREFIX_DIMS)
            runs.append(RunResult(method, seed, evaluation))
            print(
                f"  {method:>10} seed {seed:>4}: S = {evaluation.steerability.s:+.3f}  "
                f"fine@256 = {evaluation.knn_accuracy[-1, -1]:.3f}",
                flush=True,
            )
    return runs


def fmt(summary, key: str) -> str:
    mean, sd = summary.metrics[key]
    return f"{mean:+.3f}" if np.isnan(sd) else f"{mean:+.3f} ± {sd:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="small, fast run for CI")
    parser.add_argument("--progress", action="store_true", help="show per-run progress bars")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    args = parser.parse_args()
    results = args.out
    results.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(os.cpu_count() or 1)
    started = time.perf_counter()
    suffix = "_smoke" if args.smoke else ""
    seeds = PAPER_SEEDS[:2] if args.smoke else PAPER_SEEDS
    sizes = (1500, 300) if args.smoke else (10000, 2000)
    base = TrainConfig(epochs=1) if args.smoke else TrainConfig()
    encoder = FrozenEncoder()

    print("CLINC-150, 2 levels (10 domains → 150 intents)", flush=True)
    data = prepare_data(DataConfig("clinc150", *sizes), encoder, progress=args.progress)
    raw_384 = knn_accuracy_table(
        data.train_features,
        data.splits.train.labels,
        data.test_features,
        data.splits.test.labels,
        [384],
    )[:, 0]
    methods = {name: replace(base, objective=name) for name in ("v5", "mrl", *ABLATIONS)}
    runs = [RunResult("raw", 0, evaluate_raw(data, PREFIX_DIMS))]
    runs += run_methods(data, methods, seeds, args.progress)
    core_seconds = time.perf_counter() - started
    paper_recipe = {
        "v5-paper": replace(base, objective="v5", **PAPER_RECIPE),
        "mrl-paper": replace(base, objective="mrl", **PAPER_RECIPE),
    }
    runs += run_methods(data, paper_recipe, seeds, args.progress)
    pairs = [("v5", "mrl"), *(("v5", name) for name in ABLATIONS), ("v5-paper", "mrl-paper")]
    write_report(
        runs,
        results / f"clinc150{suffix}",
        list(data.hierarchy.level_names),
        pairs=pairs,
        title="CLINC-150 reproduction (2 levels)",
    )
    summary = summarise(runs)
    comparisons = {f"{c.a} vs {c.b} ({c.metric})": c for c in compare(runs, pairs)}

    print("Discard-weight sweep (V5, first seed)", flush=True)
    sweep = []
    for weight in DISCARD_SWEEP:
        result = train(
            data,
            replace(base, objective="v5", discard_weight=weight, seed=seeds[0]),
            progress=args.progress,
        )
        evaluation = evaluate_head(data, result.head, PREFIX_DIMS)
        sweep.append(
            {
                "discard_weight": weight,
                "s": evaluation.steerability.s,
                "knn": evaluation.knn_accuracy.tolist(),
            }
        )
        print(f"  discard {weight:>4}: S = {evaluation.steerability.s:+.3f}", flush=True)

    print("CLINC-150, 3 levels (5 super-domains → 10 domains → 150 intents)", flush=True)
    data3 = prepare_data(DataConfig("clinc150-3level", *sizes), encoder, progress=args.progress)
    runs3 = [RunResult("raw", 0, evaluate_raw(data3, PREFIX_DIMS))]
    runs3 += run_methods(data3, {m: methods[m] for m in ("v5", "mrl")}, seeds, args.progress)
    write_report(
        runs3,
        results / f"clinc150_3level{suffix}",
        list(data3.hierarchy.level_names),
        title="CLINC-150 reproduction (3 levels)",
    )
    summary3 = summarise(runs3)
    total_seconds = time.perf_counter() - started

    v5, mrl = summary["v5"], summary["mrl"]
    v5_ramp = v5.recall_at_1[0][-1, -1] - v5.recall_at_1[0][-1, 0]
    mrl_ramp = mrl.recall_at_1[0][-1, -1] - mrl.recall_at_1[0][-1, 0]
    p_value = comparisons["v5 vs mrl (s)"].result.p
    targets = [
        ("V5 mean S ≥ +0.15", v5.metrics["s"][0] >= 0.15, fmt(v5, "s")),
        (
            "V5 fine k-NN @256d ≥ raw encoder @384d",
            v5.knn_accuracy[0][-1, -1] >= raw_384[-1],
            f"{v5.knn_accuracy[0][-1, -1]:.3f} vs {raw_384[-1]:.3f}",
        ),
        ("MRL |S| ≤ 0.02", abs(mrl.metrics["s"][0]) <= 0.02, fmt(mrl, "s")),
        ("V5 vs MRL paired t-test p < 0.01", p_value < 0.01, f"p = {p_value:.2g}"),
        ("inverted S < 0", summary["inverted"].metrics["s"][0] < 0, fmt(summary["inverted"], "s")),
        (
            "UHMT |S| ≤ 0.02",
            abs(summary["uhmt"].metrics["s"][0]) <= 0.02,
            fmt(summary["uhmt"], "s"),
        ),
        (
            "no-prefix |S| ≤ 0.02",
            abs(summary["no-prefix"].metrics["s"][0]) <= 0.02,
            fmt(summary["no-prefix"], "s"),
        ),
        ("V5 fine Recall@1 ramp 64→256d ≥ 6 pp", v5_ramp >= 0.06, f"{100 * v5_ramp:+.1f} pp"),
        ("MRL fine Recall@1 ramp ≤ 1 pp", mrl_ramp <= 0.01, f"{100 * mrl_ramp:+.1f} pp"),
        (
            "CLINC reproduction (features, V5, MRL, 3 ablations × seeds, evaluation) < 15 min",
            core_seconds < 900,
            f"{core_seconds / 60:.1f} min",
        ),
    ]
    machine = (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU threads, "
        f"torch {torch.__version__}"
    )
    record = {
        "machine": machine,
        "smoke": args.smoke,
        "encoder": encoder.config.to_json(),
        "data": {"train": len(data.splits.train), "test": len(data.splits.test), "data_seed": 42},
        "seeds": list(seeds),
        "train_config": base.to_json(),
        "raw_384_knn": raw_384.tolist(),
        "methods": {
            name: {
                "s": s.metrics["s"],
                "fine_256": [float(s.knn_accuracy[0][-1, -1]), float(s.knn_accuracy[1][-1, -1])],
                "knn_mean": s.knn_accuracy[0].tolist(),
            }
            for name, s in summary.items()
        },
        "comparisons": {key: c.result.to_dict() for key, c in comparisons.items()},
        "discard_sweep": sweep,
        "three_level": {
            name: {"s02": s.metrics["s"], "knn_mean": s.knn_accuracy[0].tolist()}
            for name, s in summary3.items()
        },
        "targets": [{"target": t, "met": bool(ok), "reached": value} for t, ok, value in targets],
        "seconds": {"core_reproduction": core_seconds, "total": total_seconds},
    }
    (results / f"clinc150_reproduction{suffix}.json").write_text(json.dumps(record, indent=2))
    (results / f"clinc150_reproduction{suffix}.md").write_text(
        markdown(record, summary, summary3, comparisons, sweep, targets, raw_384, suffix)
    )
    print(f"done in {total_seconds / 60:.1f} min → {results}/clinc150_reproduction{suffix}.md")


def markdown(record, summary, summary3, comparisons, sweep, targets, raw_384, suffix) -> str:
    lines = [
        f"# CLINC-150 reproduction{' (smoke run)' if suffix else ''}",
        "",
        f"Machine: {record['machine']}. Encoder: all-MiniLM-L6-v2 (frozen, mean pooling). "
        f"Data: {record['data']['train']} train / {record['data']['test']} test utterances "
        f"(seeded subsample, data seed 42). Seeds: {', '.join(map(str, record['seeds']))}. "
        f"Training: {record['train_config']['epochs']} epochs, batch "
        f"{record['train_config']['batch_size']}, lr {record['train_config']['learning_rate']}, "
        f"SupCon weight {record['train_config']['supcon_weight']}, discard weight "
        f"{record['train_config']['discard_weight']} (the `-paper` rows: both 0). "
        f"Wall time: {record['seconds']['core_reproduction'] / 60:.1f} min for the core "
        f"reproduction, {record['seconds']['total'] / 60:.1f} min with the paper-recipe rows, "
        "the sweep and the 3-level runs.",
        "",
        "Command: `python benchmarks/reproduce_clinc.py" + (" --smoke" if suffix else "") + "`",
        "",
        "## Targets",
        "",
        "| target | reached | met |",
        "|---|---|---|",
        *(f"| {t} | {value} | {'yes' if ok else '**no**'} |" for t, ok, value in targets),
        "",
        "## Steerability next to the paper (paper: BGE-small; ours: MiniLM-L6)",
        "",
        "| method | S (ours, mean ± sd) | fine k-NN @256d | paper S |",
        "|---|---|---|---|",
    ]
    paper_key = {
        "v5": "v5_s",
        "mrl": "mrl_s",
        "inverted": "inverted_s",
        "no-prefix": "no-prefix_s",
        "uhmt": "uhmt_s",
    }
    for name, s in summary.items():
        paper = PAPER.get(paper_key.get(name, ""), "")
        lines.append(f"| {name} | {fmt(s, 's')} | {s.knn_accuracy[0][-1, -1]:.3f} | {paper} |")
    lines += [
        "",
        f"Raw encoder at its full 384 dims: domain {raw_384[0]:.3f}, intent {raw_384[-1]:.3f} "
        "k-NN accuracy. Paper, V5 fine @256d: " + PAPER["v5_fine_256"] + ".",
        "",
        "| paired comparison | mean diff | t | p | Cohen's d |",
        "|---|---|---|---|---|",
    ]
    for key, c in comparisons.items():
        if key.endswith("(s)"):
            r = c.result
            lines.append(
                f"| {key} | {r.mean_diff:+.3f} | {r.t:.2f} | {r.p:.2g} | {r.cohens_d:.2f} |"
            )
    lines += [
        "",
        "## Discard weight sweep (V5, seed 42)",
        "",
        "| discard weight | S | domain 64d | domain 256d | intent 64d | intent 256d |",
        "|---|---|---|---|---|---|",
    ]
    for row in sweep:
        knn = np.asarray(row["knn"])
        lines.append(
            f"| {row['discard_weight']:g} | {row['s']:+.3f} | {knn[0, 0]:.3f} | "
            f"{knn[0, -1]:.3f} | {knn[-1, 0]:.3f} | {knn[-1, -1]:.3f} |"
        )
    lines += [
        "",
        "## Three levels (Table 8): S_02 (super-domain vs intent)",
        "",
        "| method | S_02 | super-domain 64d → 256d | domain 64d → 256d | intent 64d → 256d |",
        "|---|---|---|---|---|",
    ]
    for name, s in summary3.items():
        knn = s.knn_accuracy[0]
        cells = " | ".join(f"{knn[level, 0]:.3f} → {knn[level, -1]:.3f}" for level in range(3))
        lines.append(f"| {name} | {fmt(s, 's')} | {cells} |")
    lines += [
        "",
        f"Paper: {PAPER['three_level_s02']}.",
        "",
        f"Full tables and plots: `clinc150{suffix}/report.md`, "
        f"`clinc150_3level{suffix}/report.md`.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
