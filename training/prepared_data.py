"""Which texts an offline job uses and their frozen features: :class:`DataConfig` →
:func:`prepare_data` → :class:`PreparedData`. Every job starts here: heads on frozen features
(:mod:`training.head_job`), contrastive fine-tuning (:mod:`training.finetune_job`) and MSHC
(:mod:`training.mshc`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from training.data.dataset import DatasetSplits, LabelHierarchy
from training.data.registry import load_dataset
from training.frozen_encoder import FrozenEncoder, cached_features


@dataclass(frozen=True)
class DataConfig:
    """Which texts: a dataset name or path, the subsample sizes and the seed that draws them.

    The data seed is separate from the training seeds so that every run of an experiment sees
    the same train/test rows and differs only in its training randomness (paper, Table 4).
    """

    dataset: str = "clinc150"
    max_train: int | None = 10000
    max_test: int | None = 2000
    data_seed: int = 42
    generic_options: dict[str, Any] = field(default_factory=dict)

    def load(self) -> DatasetSplits:
        return load_dataset(
            self.dataset,
            seed=self.data_seed,
            max_train=self.max_train,
            max_test=self.max_test,
            **self.generic_options,
        )


@dataclass
class PreparedData:
    """Texts, labels and frozen features for one experiment."""

    config: DataConfig
    splits: DatasetSplits
    encoder: FrozenEncoder
    train_features: np.ndarray
    test_features: np.ndarray

    @property
    def hierarchy(self) -> LabelHierarchy:
        return self.splits.hierarchy

    @property
    def num_classes(self) -> list[int]:
        return [self.hierarchy.num_classes(level) for level in range(self.hierarchy.depth)]


def prepare_data(
    config: DataConfig,
    encoder: FrozenEncoder,
    *,
    splits: DatasetSplits | None = None,
    progress: bool = True,
) -> PreparedData:
    """Load the dataset (unless ``splits`` is given) and its frozen features (cached on disk,
    see :func:`cached_features`)."""
    splits = splits if splits is not None else config.load()
    name = Path(config.dataset).name
    features = {
        split: cached_features(encoder, part.texts, dataset=name, split=split, progress=progress)
        for split, part in (("train", splits.train), ("test", splits.test))
    }
    return PreparedData(config, splits, encoder, features["train"], features["test"])
