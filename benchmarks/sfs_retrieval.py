"""SFS against global cosine for retrieval on CLINC-150 (SFS paper, Table 1, on our data).

A head (``R^384 → R^256`` projection on the frozen MiniLM features) is trained with the SFS
contrastive objective at each fragment size ``d_frag ∈ {256, 128, 64, 32, 16}``
(:class:`training.objectives.sfs.SFSLoss`; ``d_frag = 256`` is one fragment, i.e. the
global-cosine-trained baseline). Every trained head is then scored with every similarity — global
cosine and SFS at each fragment size — by Recall@1, Recall@10 and MRR@10 of the test utterances
against the training utterances, relevant = same intent (:mod:`training.evaluation.ranking`).

    python -m benchmarks sfs_retrieval                   # CLINC-150, 10,000 / 2,000 texts, 3 seeds
    python -m benchmarks sfs_retrieval --smoke --out /tmp/x

Writes ``sfs_retrieval_<dataset>.{json,md}`` (``_smoke`` in smoke runs) under ``--out``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from benchmarks.harness.markdown import bullet_sections, markdown_table
from benchmarks.harness.runner import Progress, option
from training.evaluation.ranking import ranking_metrics
from training.finetune import FinetuneConfig, embed_texts, finetune
from training.frozen_encoder import FrozenEncoder
from training.prepared_data import DataConfig, prepare_data

FRAGMENT_DIMS = (256, 128, 64, 32, 16)
METRICS = ("recall@1", "recall@10", "mrr@10")


@dataclass(frozen=True)
class Settings:
    """Every parameter of a run."""

    dataset: str = option("clinc150", "dataset name or path")
    max_train: int = option(10000, "training texts")
    max_test: int = option(2000, "test texts")
    dim: int = option(256, "head output size")
    fragments: tuple[int, ...] = option(FRAGMENT_DIMS, "comma-separated fragment sizes")
    seeds: tuple[int, ...] = option((42, 123, 456), "comma-separated seeds")
    steps: int = option(2000, "training steps")
    batch_size: int = option(64, "batch size")


SMOKE = Settings(max_train=1500, max_test=300, steps=20, seeds=(42,))


def results_name(settings: Settings) -> str:
    return f"sfs_retrieval_{Path(settings.dataset).name}"


def _score_name(fragment_dim: int, dim: int) -> str:
    return "cosine" if fragment_dim == dim else f"sfs-{fragment_dim}"


def markdown(payload: dict) -> str:
    dim = payload["setting"]["dim"]
    lines = [f"# SFS vs global cosine: {payload['dataset']}", ""]
    mean = payload["mean"]
    lines += [
        "## Trained and scored with the same fragment size, against the same model scored by "
        "global cosine (×100, mean over seeds)",
        "",
    ]
    rows = []
    for fragment_dim in payload["fragment_dims"]:
        own = mean[str(fragment_dim)][_score_name(fragment_dim, dim)]
        cosine = mean[str(fragment_dim)]["cosine"]
        rows.append(
            [f"({dim // fragment_dim}, {fragment_dim})"]
            + [f"{own[m] * 100:.2f}" for m in METRICS]
            + [f"{cosine[m] * 100:.2f}" for m in METRICS]
            + [f"{(own['mrr@10'] - cosine['mrr@10']) * 100:+.2f}"]
        )
    headers = ["trained (N_f, d_frag)", *(f"SFS {m}" for m in METRICS),
               *(f"cosine {m}" for m in METRICS), "ΔMRR@10"]
    lines += [markdown_table(headers, rows), ""]
    lines += ["## MRR@10 of every trained head under every scoring (×100, mean over seeds)", ""]
    scorings = [_score_name(f, dim) for f in payload["fragment_dims"]]
    lines += [
        markdown_table(
            ["trained d_frag", *scorings],
            [[str(f)] + [f"{mean[str(f)][s]['mrr@10'] * 100:.2f}" for s in scorings]
             for f in payload["fragment_dims"]],
        ),
        "",
        *bullet_sections({"Setting": payload["setting"], "Machine": payload["machine"]}),
    ]
    return "\n".join(lines)


def run(settings: Settings, progress: Progress) -> dict:
    torch.set_num_threads(1)
    encoder = FrozenEncoder()
    data = prepare_data(DataConfig(settings.dataset, settings.max_train, settings.max_test),
                        encoder, progress=False)
    train_labels, test_labels = data.splits.train.labels[:, -1], data.splits.test.labels[:, -1]
    dim = settings.dim
    base = FinetuneConfig(objective="sfs", dim=dim, prefix_dims=(dim,), unfreeze_layers=0,
                          steps=settings.steps, batch_size=settings.batch_size)
    scorings = {_score_name(f, dim): (None if f == dim else f) for f in settings.fragments}
    scores: dict[str, dict[str, list[dict]]] = {}
    start = time.perf_counter()
    for fragment_dim in settings.fragments:
        for seed in settings.seeds:
            progress(f"fragment {fragment_dim}, seed {seed}")
            config = replace(base, fragment_dim=fragment_dim, seed=seed)
            result = finetune(encoder, data.splits.train.texts, train_labels, config,
                              features=data.train_features, progress=False)
            train_vectors = embed_texts(result, encoder, (), features=data.train_features)
            test_vectors = embed_texts(result, encoder, (), features=data.test_features)
            for name, scoring in scorings.items():
                scores.setdefault(str(fragment_dim), {}).setdefault(name, []).append(
                    ranking_metrics(train_vectors, train_labels, test_vectors, test_labels,
                                    fragment_dim=scoring)
                )
    mean = {
        trained: {
            name: {m: float(np.mean([r[m] for r in runs])) for m in METRICS}
            for name, runs in by_scoring.items()
        }
        for trained, by_scoring in scores.items()
    }
    return {
        "dataset": settings.dataset,
        "fragment_dims": list(settings.fragments),
        "setting": {
            "train_texts": len(data.splits.train), "test_texts": len(data.splits.test),
            "seeds": list(settings.seeds), **base.to_json(), "fragment_dim": "per row",
            "seconds_total": round(time.perf_counter() - start, 1),
        },
        "machine": {"torch_threads": 1},
        "mean": mean,
        "per_seed": scores,
        "targets": [],
    }
