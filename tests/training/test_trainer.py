"""Head training on real MiniLM features of a CLINC-150 subset."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from training.errors import FractalError
from training.head_job import evaluate_head, train
from training.prepared_data import PreparedData
from training.train_config import TrainConfig
from training.trainer import train_head

FAST = TrainConfig(epochs=3, learning_rate=1e-3, batch_size=32)


def test_v5_steers_and_mrl_does_not(small_clinc: PreparedData) -> None:
    scores = {}
    for objective in ("v5", "mrl"):
        result = train(small_clinc, replace(FAST, objective=objective), progress=False)
        evaluation = evaluate_head(small_clinc, result.head, [64, 128, 192, 256])
        scores[objective] = evaluation
        assert len(result.history) == FAST.epochs
        assert 1 <= result.best_epoch <= FAST.epochs
    v5, mrl = scores["v5"], scores["mrl"]
    assert v5.steerability.s > mrl.steerability.s + 0.05
    # V5's short prefix keeps the domain but drops most of the intent; MRL's keeps both.
    assert v5.knn_accuracy[1, 0] < mrl.knn_accuracy[1, 0] - 0.05
    assert v5.knn_accuracy[0, 0] > 0.8


def test_training_is_deterministic_per_seed(small_clinc: PreparedData) -> None:
    config = replace(FAST, epochs=1)
    features = small_clinc.train_features[:400]
    labels = small_clinc.splits.train.labels[:400]
    first = train_head(features, labels, small_clinc.num_classes, config, progress=False)
    second = train_head(features, labels, small_clinc.num_classes, config, progress=False)
    other = train_head(
        features, labels, small_clinc.num_classes, replace(config, seed=7), progress=False
    )
    weight = first.head.projection.weight.detach().numpy()
    np.testing.assert_array_equal(weight, second.head.projection.weight.detach().numpy())
    assert not np.allclose(weight, other.head.projection.weight.detach().numpy())


@pytest.mark.parametrize(
    ("config", "depth", "message"),
    [
        (TrainConfig(objective="fractal"), 2, "unknown objective 'fractal'"),
        (TrainConfig(), 1, "at least 2 levels"),
        (TrainConfig(prefix_dims=(64, 128, 256, 192)), 2, "increasing and end at dim=256"),
        (TrainConfig(epochs=0), 2, "epochs"),
    ],
)
def test_bad_configs_are_refused(config: TrainConfig, depth: int, message: str) -> None:
    with pytest.raises(FractalError, match=message):
        config.validate(depth)


def test_too_few_texts_for_a_batch(small_clinc: PreparedData) -> None:
    with pytest.raises(FractalError, match="too few for batch size"):
        train_head(
            small_clinc.train_features[:10],
            small_clinc.splits.train.labels[:10],
            small_clinc.num_classes,
            FAST,
            progress=False,
        )
