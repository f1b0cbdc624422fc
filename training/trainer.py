"""Head-only training on frozen features (Fractal paper §3 and App. H).

The loop is the paper's: batch 16, AdamW with cosine decay, gradient clipping at 1.0, best epoch
chosen on a held-out validation slice of the training set by the heads' coarse + fine accuracy;
the default budget is longer (10 epochs at 3e-4 against the paper's 5 at 1e-4, see
:class:`training.train_config.TrainConfig`). FP16 is not used: on a CPU it buys nothing.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm

from training.errors import FractalError
from training.head import FractalHead
from training.objectives import OBJECTIVES
from training.objectives.base import FineSpread
from training.train_config import TrainConfig


@dataclass
class TrainResult:
    head: FractalHead
    config: TrainConfig
    history: list[dict] = field(default_factory=list)
    best_epoch: int = 0


def _head_accuracy(
    head: FractalHead, features: torch.Tensor, labels: torch.Tensor, coarse_dim: int
) -> float:
    """Coarse head on the coarse prefix plus fine head on the full vector (paper: val L0 + L1)."""
    with torch.no_grad():
        embedding = head(features)
        coarse = head.logits(embedding, 0, coarse_dim).argmax(1) == labels[:, 0]
        fine = (
            head.logits(embedding, len(head.classifiers) - 1, head.dim).argmax(1) == labels[:, -1]
        )
    return float(coarse.float().mean() + fine.float().mean())


def validation_split(
    size: int, fraction: float, generator: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """The held-out validation rows and the rows the head is fitted on, out of ``size`` training
    rows: the first ``round(fraction · size)`` of a permutation drawn from ``generator``.

    :func:`train_head` draws it first from ``default_rng(config.seed)``, so the same call on a
    fresh generator of that seed gives back a run's validation rows (the router's fit uses them:
    :mod:`training.router_fit`).
    """
    order = generator.permutation(size)
    num_validation = int(round(fraction * size))
    return order[:num_validation], order[num_validation:]


def train_head(
    features: np.ndarray,
    labels: np.ndarray,
    num_classes: list[int],
    config: TrainConfig,
    *,
    progress: bool = True,
) -> TrainResult:
    """Train a :class:`FractalHead` with ``config.objective`` on frozen ``features``."""
    config.validate(len(num_classes))
    if len(features) != len(labels):
        raise ValueError("features and labels differ in length")
    torch.manual_seed(config.seed)
    generator = np.random.default_rng(config.seed)
    val_idx, train_idx = validation_split(len(features), config.validation_fraction, generator)
    if len(train_idx) < config.batch_size:
        raise FractalError(
            f"{len(features)} training texts are too few for batch size {config.batch_size}"
        )
    x = torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32))
    y = torch.from_numpy(np.asarray(labels, dtype=np.int64))

    head = FractalHead(features.shape[1], num_classes, dim=config.dim)
    loss_fn = OBJECTIVES[config.objective](
        head,
        config.prefix_dims,
        prefix_probs=config.prefix_probs,
        block_keep=config.block_keep,
        prefix_weight=config.prefix_weight,
        supcon_weight=config.supcon_weight,
        discard_weight=config.discard_weight,
        fine_spread=FineSpread.from_data(x[train_idx], y[train_idx]),
    )
    optimizer = torch.optim.AdamW(
        head.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
    )
    steps_per_epoch = len(train_idx) // config.batch_size
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=config.epochs * steps_per_epoch
    )
    result = TrainResult(head=head, config=config)
    best_score, best_state = -1.0, None
    bar = tqdm(
        total=config.epochs * steps_per_epoch,
        desc=f"train {config.objective} seed {config.seed}",
        unit="step",
        disable=not progress,
        leave=False,
    )
    for epoch in range(1, config.epochs + 1):
        head.train()
        shuffled = generator.permutation(train_idx)
        total = 0.0
        for step in range(steps_per_epoch):
            batch = shuffled[step * config.batch_size : (step + 1) * config.batch_size]
            loss = loss_fn(x[batch], y[batch], generator)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), config.grad_clip)
            optimizer.step()
            scheduler.step()
            total += float(loss.detach())
            bar.update()
        head.eval()
        score_idx = val_idx if len(val_idx) else train_idx
        score = _head_accuracy(head, x[score_idx], y[score_idx], config.prefix_dims[0])
        result.history.append(
            {"epoch": epoch, "train_loss": total / steps_per_epoch, "val_accuracy_sum": score}
        )
        if score > best_score:
            best_score, best_state, result.best_epoch = (
                score,
                copy.deepcopy(head.state_dict()),
                epoch,
            )
    bar.close()
    head.load_state_dict(best_state)
    head.eval()
    return result


@torch.no_grad()
def embed_features(head: FractalHead, features: np.ndarray, batch_size: int = 4096) -> np.ndarray:
    """Project frozen features to full, unnormalised embeddings."""
    out = [
        head(torch.from_numpy(np.ascontiguousarray(features[i : i + batch_size], np.float32)))
        for i in range(0, len(features), batch_size)
    ]
    return torch.cat(out).numpy()
