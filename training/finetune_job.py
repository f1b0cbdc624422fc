"""``fractal finetune``: one contrastive run (MRL, MIC, MIPIC or SFS), evaluated and exported.

Data → (cached frozen features when the backbone stays frozen) → :func:`training.finetune.finetune`
→ evaluation on the test split → bundle. The evaluation is the papers': logistic-regression macro
F1 and 5-NN accuracy of the finest label at every nested dim (MIC/MIPIC), and for SFS Recall@1/10
and MRR@10 scored by SFS and by global cosine. It is written to ``report.json``/``report.md``,
shipped in the bundle, and summarised in the manifest.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bundle import COARSE, FINE
from training.evaluation.knn import knn_accuracy_table
from training.evaluation.linear_probe import logistic_regression_scores
from training.evaluation.ranking import ranking_metrics
from training.evaluation.shortlist import measure_shortlist
from training.export import export_bundle
from training.finetune import FinetuneConfig, as_head, embed_texts, finetune
from training.prepared_data import DataConfig, prepare_data

REPORT_JSON = "report.json"
REPORT_MD = "report.md"


def evaluate_finetuned(
    train_vectors: np.ndarray,
    train_labels: np.ndarray,
    test_vectors: np.ndarray,
    test_labels: np.ndarray,
    config: FinetuneConfig,
) -> dict:
    """The run's scores: per-dim LR F1 and k-NN accuracy; for SFS, ranking by SFS and cosine."""
    dims = list(config.prefix_dims)
    probe = logistic_regression_scores(train_vectors, train_labels, test_vectors, test_labels, dims)
    report: dict = {
        "prefix_dims": dims,
        "lr_macro_f1": probe["macro_f1"].tolist(),
        "lr_accuracy": probe["accuracy"].tolist(),
        "knn_accuracy": knn_accuracy_table(
            train_vectors, train_labels[:, None], test_vectors, test_labels[:, None], dims
        )[0].tolist(),
    }
    if config.fragment_dim is not None:
        report["ranking"] = {
            "cosine": ranking_metrics(train_vectors, train_labels, test_vectors, test_labels),
            f"sfs-{config.fragment_dim}": ranking_metrics(
                train_vectors, train_labels, test_vectors, test_labels,
                fragment_dim=config.fragment_dim,
            ),
        }
    return report


def _markdown(report: dict, config: FinetuneConfig, dataset: str) -> str:
    dims = report["prefix_dims"]
    lines = [
        f"# {config.objective} on {dataset}",
        "",
        "| metric | " + " | ".join(map(str, dims)) + " |",
        "|---|" + "---|" * len(dims),
        "| LR macro F1 | " + " | ".join(f"{v * 100:.2f}" for v in report["lr_macro_f1"]) + " |",
        "| LR accuracy | " + " | ".join(f"{v * 100:.2f}" for v in report["lr_accuracy"]) + " |",
        "| 5-NN accuracy | " + " | ".join(f"{v * 100:.2f}" for v in report["knn_accuracy"]) + " |",
        "",
    ]
    for scoring, metrics in report.get("ranking", {}).items():
        lines.append(
            f"- {scoring}: " + ", ".join(f"{k} {v * 100:.2f}" for k, v in metrics.items())
        )
    lines += ["", "```", json.dumps(config.to_json(), indent=2), "```"]
    return "\n".join(lines)


def run_finetune(
    data_config: DataConfig,
    encoder,
    config: FinetuneConfig,
    out: Path,
    *,
    name: str | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> Path:
    """Train, evaluate and export; returns the bundle directory ``out/bundle``."""
    config.validate()
    data = prepare_data(data_config, encoder, progress=progress)
    train_labels = data.splits.train.labels[:, -1]
    test_labels = data.splits.test.labels[:, -1]
    frozen_features = config.unfreeze_layers == 0
    result = finetune(
        encoder, data.splits.train.texts, train_labels, config,
        features=data.train_features if frozen_features else None, progress=progress,
    )
    train_vectors = embed_texts(result, encoder, data.splits.train.texts,
                                features=data.train_features if frozen_features else None)
    test_vectors = embed_texts(result, encoder, data.splits.test.texts,
                               features=data.test_features if frozen_features else None)
    report = evaluate_finetuned(train_vectors, train_labels, test_vectors, test_labels, config)
    report["config"] = config.to_json()
    report["history"] = result.history
    report_dir = out / "report"
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / REPORT_JSON).write_text(json.dumps(report, indent=2))
    (report_dir / REPORT_MD).write_text(_markdown(report, config, data_config.dataset))
    dims = list(config.prefix_dims)
    export_bundle(
        out / "bundle",
        encoder,
        as_head(result),
        name=name or f"{Path(data_config.dataset).name}-{config.objective}",
        objective=config.objective,
        prefix_dims=dims,
        granularity={COARSE: dims[0], FINE: dims[-1]},
        hierarchy=None,
        evaluation={k: v for k, v in report.items() if k != "history"},
        report_files={p.name: p for p in sorted(report_dir.iterdir())},
        check_texts=list(data.splits.test.texts[:64]),
        fragment_dim=config.fragment_dim,
        with_heads=False,
        overwrite=overwrite,
        shortlist=measure_shortlist(
            train_vectors,
            test_vectors,
            dims,
            domains=(data.splits.train.labels[:, 0], data.splits.test.labels[:, 0]),
        ),
    )
    return out / "bundle"
