"""Low-dimension evaluation of MIC and MIPIC against a matched MRL (MIC/MIPIC papers, Table 1).

Each objective trains the same encoder on the same texts with the same steps, batches, unfrozen
layers and learning rates (:class:`training.finetune.FinetuneConfig`, only ``objective``
differs); every trained encoder is then scored at each nested dimension by logistic-regression
macro F1 on frozen features (:mod:`training.evaluation.linear_probe`) and 5-NN accuracy
(:mod:`training.evaluation.knn`). The untrained encoder's own prefixes are the ``raw`` row.

    python -m benchmarks low_dim                        # Banking77, 3,000 training texts
    python -m benchmarks low_dim --dataset clinc150 --max-train 3000 --max-test 3000
    python -m benchmarks low_dim --smoke --out /tmp/x   # seconds; what CI runs

Writes ``low_dim_<dataset>.{json,md,png}`` (``_smoke`` in smoke runs) under ``--out``; the JSON
is rewritten after every run, so an interrupted benchmark keeps what it measured.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

from benchmarks.harness.markdown import bullet_sections, markdown_table
from benchmarks.harness.runner import Progress, option
from training.data.registry import load_dataset
from training.evaluation.knn import knn_accuracy_table
from training.evaluation.linear_probe import logistic_regression_f1
from training.finetune import FinetuneConfig, embed_texts, finetune
from training.frozen_encoder import FrozenEncoder

# Banking77 LR F1 (×100) from the papers' Table 1 at 16/32/64/128/256 dims (their 512/768 rows
# have no MiniLM counterpart): backbone → method → scores.
PAPER_BANKING77 = {
    "TinyBERT-6L": {
        "MRL (MIC paper)": [40.64, 62.59, 73.58, 80.31, 85.04],
        "MIC": [44.1, 65.7, 77.52, 83.49, 86.52],
        "MRL (MIPIC paper)": [40.64, 63.48, 74.89, 81.97, 85.51],
        "MIPIC": [48.93, 65.68, 74.88, 82.43, 86.78],
    },
    "BERT-base": {
        "MRL": [46.39, 64.9, 76.84, 83.49, 86.45],
        "MIC": [59.45, 75.71, 83.05, 86.57, 88.11],
        "MIPIC": [54.65, 71.67, 79.23, 86.24, 87.64],
    },
}
PAPER_DIMS = [16, 32, 64, 128, 256]
# Config fields that differ per run (or do not apply), left out of the shared setting block.
PER_RUN_KEYS = ("objective", "fragment_dim", "seed")


@dataclass(frozen=True)
class Settings:
    """Every parameter of a run."""

    dataset: str = option("banking77", "dataset name or path")
    max_train: int = option(3000, "training texts (the papers sample 3,000)")
    max_test: int | None = option(None, "test texts (default: the whole test split)")
    objectives: tuple[str, ...] = option(("mrl", "mic", "mipic"), "comma-separated objectives")
    seeds: tuple[int, ...] = option((42,), "comma-separated seeds")
    dims: tuple[int, ...] = option((16, 32, 64, 128, 256, 384), "comma-separated prefixes")
    steps: int = option(300, "fine-tuning steps")
    batch_size: int = option(32, "batch size")
    unfreeze_layers: int = option(6, "top encoder layers trained")
    max_tokens: int = option(64, "tokens per text")
    threads: int = option(1, "torch threads")


SMOKE = Settings(max_train=120, max_test=40, steps=2, batch_size=8, unfreeze_layers=1)


def results_name(settings: Settings) -> str:
    return f"low_dim_{Path(settings.dataset).name}"


def _evaluate(train_vectors, train_labels, test_vectors, test_labels, dims) -> dict:
    f1 = logistic_regression_f1(train_vectors, train_labels, test_vectors, test_labels, dims)
    knn = knn_accuracy_table(
        train_vectors, train_labels[:, None], test_vectors, test_labels[:, None], dims
    )[0]
    return {"lr_macro_f1": f1.tolist(), "knn_accuracy": knn.tolist()}


def markdown(payload: dict) -> str:
    dims = payload["dims"]
    lines = [f"# Low-dimension evaluation: {payload['dataset']}", ""]
    for metric, title in (("lr_macro_f1", "Logistic-regression macro F1"), ("knn_accuracy",
                                                                             "5-NN accuracy")):
        lines += [f"## {title} (×100, mean over seeds)", ""]
        rows = []
        for objective, summary in payload["summary"].items():
            rows.append([objective, summary["seeds"]] + [f"{v * 100:.2f}" for v in summary[metric]])
        lines += [markdown_table(["objective", "seeds", *map(str, dims)], rows), ""]
        if "mrl" in payload["summary"]:
            base = np.asarray(payload["summary"]["mrl"][metric])
            rows = [
                [objective, *(f"{d * 100:+.2f}" for d in np.asarray(s[metric]) - base)]
                for objective, s in payload["summary"].items()
                if objective not in ("mrl", "raw")
            ]
            lines += ["Difference to matched MRL (points):", ""]
            lines += [markdown_table(["objective", *map(str, dims)], rows), ""]
    lines += ["## Per run", ""]
    lines += [
        markdown_table(
            ["objective", "seed", "train s", *(f"F1@{d}" for d in dims)],
            [
                [r["objective"], r["seed"], f"{r['train_seconds']:.0f}"]
                + [f"{v * 100:.2f}" for v in r["lr_macro_f1"]]
                for r in payload["runs"]
            ],
        ),
        "",
        *bullet_sections({"Setting": payload["setting"], "Machine": payload["machine"]}),
    ]
    return "\n".join(lines)


def _summarise(runs: list[dict]) -> dict:
    summary: dict[str, dict] = {}
    for objective in dict.fromkeys(r["objective"] for r in runs):
        mine = [r for r in runs if r["objective"] == objective]
        summary[objective] = {
            "seeds": len(mine),
            **{
                metric: np.mean([r[metric] for r in mine], axis=0).tolist()
                for metric in ("lr_macro_f1", "knn_accuracy")
            },
        }
    return summary


def plot(payload: dict, path: Path) -> None:
    figure = Figure(figsize=(6, 4))
    axis = figure.subplots()
    for objective, summary in payload["summary"].items():
        axis.plot(payload["dims"], np.asarray(summary["lr_macro_f1"]) * 100, marker="o",
                  label=objective)
    axis.set_xscale("log", base=2)
    axis.set_xticks(payload["dims"], [str(d) for d in payload["dims"]])
    axis.set_xlabel("prefix dimension")
    axis.set_ylabel("LR macro F1 (%)")
    axis.set_title(f"{payload['dataset']}: nested prefixes")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def run(settings: Settings, progress: Progress) -> dict:
    torch.set_num_threads(settings.threads)
    splits = load_dataset(
        settings.dataset, max_train=settings.max_train, max_test=settings.max_test
    )
    train_labels = splits.train.labels[:, -1]
    test_labels = splits.test.labels[:, -1]
    dims = list(settings.dims)
    base = FinetuneConfig(
        dim=dims[-1], prefix_dims=tuple(dims), unfreeze_layers=settings.unfreeze_layers,
        steps=settings.steps, batch_size=settings.batch_size,
    )
    payload = {
        "dataset": settings.dataset,
        "dims": dims,
        "setting": {
            "train_texts": len(splits.train), "test_texts": len(splits.test),
            "max_tokens": settings.max_tokens, "seeds": list(settings.seeds),
            **{k: v for k, v in base.to_json().items() if k not in PER_RUN_KEYS},
            "objectives": list(settings.objectives),
        },
        "machine": {"torch_threads": settings.threads},
        "paper_banking77_lr_f1": {"dims": PAPER_DIMS, **PAPER_BANKING77},
        "runs": [],
        "targets": [],
    }
    raw_encoder = FrozenEncoder(max_tokens=settings.max_tokens)
    train_features = raw_encoder.encode(list(splits.train.texts), progress=False)
    test_features = raw_encoder.encode(list(splits.test.texts), progress=False)
    raw = _evaluate(
        train_features[:, : dims[-1]], train_labels, test_features[:, : dims[-1]], test_labels,
        dims,
    )
    payload["runs"].append({"objective": "raw", "seed": 0, "train_seconds": 0.0, **raw})
    # A frozen backbone is shared by every run and its features are computed once.
    frozen = settings.unfreeze_layers == 0
    for seed in settings.seeds:
        for objective in settings.objectives:
            encoder = raw_encoder if frozen else FrozenEncoder(max_tokens=settings.max_tokens)
            config = replace(base, objective=objective, seed=seed)
            start = time.perf_counter()
            result = finetune(encoder, splits.train.texts, train_labels, config,
                              features=train_features if frozen else None,
                              progress=progress.enabled)
            seconds = time.perf_counter() - start
            scores = _evaluate(
                embed_texts(result, encoder, splits.train.texts,
                            features=train_features if frozen else None),
                train_labels,
                embed_texts(result, encoder, splits.test.texts,
                            features=test_features if frozen else None),
                test_labels,
                dims,
            )
            payload["runs"].append({"objective": objective, "seed": seed,
                                    "train_seconds": seconds, "history": result.history,
                                    **scores})
            f1 = np.round(np.array(scores["lr_macro_f1"]) * 100, 2)
            progress(f"{objective} seed {seed}: F1 {f1} ({seconds:.0f} s)")
            payload["summary"] = _summarise(payload["runs"])
            progress.checkpoint(payload)
    return payload
