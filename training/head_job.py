"""Heads on frozen features (``fractal train``, ``run``, ``evaluate``, ``export``), step by step:
prepared data (:mod:`training.prepared_data`) → head training → evaluation → a saved run.

The CLI and the reproduction benchmark are thin layers over these functions.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from training.errors import FractalError
from training.evaluation.evaluate import EmbeddingEvaluation, evaluate_embeddings
from training.evaluation.shortlist import ShortlistMeasurement, measure_shortlist
from training.head import FractalHead
from training.prepared_data import DataConfig, PreparedData
from training.train_config import TrainConfig
from training.trainer import TrainResult, embed_features, train_head

RUN_HEAD_FILE = "head.pt"
RUN_INFO_FILE = "run.json"


def train(data: PreparedData, config: TrainConfig, *, progress: bool = True) -> TrainResult:
    return train_head(
        data.train_features, data.splits.train.labels, data.num_classes, config, progress=progress
    )


def evaluate_head(
    data: PreparedData, head: FractalHead, prefix_dims: list[int]
) -> EmbeddingEvaluation:
    return evaluate_embeddings(
        embed_features(head, data.train_features),
        data.splits.train.labels,
        embed_features(head, data.test_features),
        data.splits.test.labels,
        prefix_dims,
    )


def measure_head_shortlist(
    data: PreparedData, head: FractalHead, prefix_dims: list[int]
) -> ShortlistMeasurement:
    """C2F's recall per prefix with the head's embeddings, the training split as the corpus and
    the test split as the queries, and the shortlist prefix it chooses for the bundle (with the
    first stage and the coarse beam, measured on the splits' coarse labels)."""
    return measure_shortlist(
        embed_features(head, data.train_features),
        embed_features(head, data.test_features),
        prefix_dims,
        domains=(data.splits.train.labels[:, 0], data.splits.test.labels[:, 0]),
    )


def evaluate_raw(data: PreparedData, prefix_dims: list[int]) -> EmbeddingEvaluation:
    """The baseline row: the frozen encoder's own pooled vectors, truncated to the same prefixes."""
    return evaluate_embeddings(
        data.train_features,
        data.splits.train.labels,
        data.test_features,
        data.splits.test.labels,
        prefix_dims,
    )


def save_run(
    run_dir: Path,
    result: TrainResult,
    data: PreparedData,
    evaluation: EmbeddingEvaluation,
) -> None:
    """A training run on disk: the head's weights and a JSON record of how it was made."""
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.save(result.head.state_dict(), run_dir / RUN_HEAD_FILE)
    info = {
        "data": asdict(data.config),
        "encoder": data.encoder.config.to_json(),
        "train": result.config.to_json(),
        "hierarchy": data.hierarchy.to_json(),
        "input_dim": result.head.input_dim,
        "best_epoch": result.best_epoch,
        "history": result.history,
        "evaluation": evaluation.to_dict(),
    }
    (run_dir / RUN_INFO_FILE).write_text(json.dumps(info, indent=2))


@dataclass
class SavedRun:
    """A run read back from disk."""

    path: Path
    data: DataConfig
    train: TrainConfig
    encoder: dict
    head: FractalHead
    evaluation: EmbeddingEvaluation


def load_run(run_dir: Path) -> SavedRun:
    info_path = run_dir / RUN_INFO_FILE
    if not info_path.is_file() or not (run_dir / RUN_HEAD_FILE).is_file():
        raise FractalError(
            f"{run_dir} is not a training run (no {RUN_INFO_FILE} / {RUN_HEAD_FILE})"
        )
    try:
        info = json.loads(info_path.read_text())
        data = DataConfig(**info["data"])
        train_config = TrainConfig(
            **{k: tuple(v) if isinstance(v, list) else v for k, v in info["train"].items()}
        )
        num_classes = [len(level["labels"]) for level in info["hierarchy"]["levels"]]
        head = FractalHead(info["input_dim"], num_classes, dim=train_config.dim)
        head.load_state_dict(torch.load(run_dir / RUN_HEAD_FILE, weights_only=True))
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise FractalError(f"{run_dir}: unreadable training run ({exc})") from exc
    head.eval()
    return SavedRun(
        run_dir,
        data,
        train_config,
        info["encoder"],
        head,
        EmbeddingEvaluation.from_dict(info["evaluation"]),
    )
