"""One call that scores a set of embeddings the way the V5 paper does (§2, §7, appendix I).

Inputs are the full, unnormalised vectors; every prefix is sliced and L2-normalised on its own.
Labels are ``[n, levels]`` integers, column 0 the coarsest level, the last column the finest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from training.evaluation.knn import knn_accuracy_table
from training.evaluation.retrieval import recall_at_1_table
from training.evaluation.steerability import SteerabilityScores


@dataclass(frozen=True)
class EmbeddingEvaluation:
    """The scores of one set of embeddings: tables are ``[level, prefix]``, fractions in [0, 1]."""

    prefix_dims: list[int]
    k: int
    knn_accuracy: np.ndarray
    recall_at_1: np.ndarray
    steerability: SteerabilityScores

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dictionary (tables as nested lists)."""
        return {
            "prefix_dims": list(self.prefix_dims),
            "k": self.k,
            "knn_accuracy": self.knn_accuracy.tolist(),
            "recall_at_1": self.recall_at_1.tolist(),
            "steerability": self.steerability.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EmbeddingEvaluation:
        """The inverse of :meth:`to_dict`."""
        return cls(
            prefix_dims=[int(dim) for dim in data["prefix_dims"]],
            k=int(data["k"]),
            knn_accuracy=np.asarray(data["knn_accuracy"], dtype=np.float64),
            recall_at_1=np.asarray(data["recall_at_1"], dtype=np.float64),
            steerability=SteerabilityScores(**data["steerability"]),
        )


def _check_inputs(
    train_vectors: np.ndarray,
    train_labels: np.ndarray,
    test_vectors: np.ndarray,
    test_labels: np.ndarray,
    prefix_dims: list[int],
) -> None:
    for name, vectors, labels in (
        ("train", train_vectors, train_labels),
        ("test", test_vectors, test_labels),
    ):
        if vectors.ndim != 2 or labels.ndim != 2 or len(vectors) != len(labels) or not len(vectors):
            raise ValueError(
                f"{name}: expected vectors [n, dim] and labels [n, levels] with the same n > 0, "
                f"got {vectors.shape} and {labels.shape}"
            )
    if train_vectors.shape[1] != test_vectors.shape[1]:
        raise ValueError(
            f"train and test dims differ: {train_vectors.shape} vs {test_vectors.shape}"
        )
    if train_labels.shape[1] != test_labels.shape[1] or train_labels.shape[1] < 2:
        raise ValueError(
            f"train and test need the same number (≥ 2) of label levels: "
            f"{train_labels.shape} vs {test_labels.shape}"
        )
    dims = np.asarray(prefix_dims)
    increasing = len(dims) >= 2 and dims[0] >= 1 and bool(np.all(np.diff(dims) > 0))
    if not increasing or dims[-1] > train_vectors.shape[1]:
        raise ValueError(
            f"prefix_dims must be ≥ 2 increasing sizes within 1..{train_vectors.shape[1]}, "
            f"got {prefix_dims}"
        )


def evaluate_embeddings(
    train_vectors: np.ndarray,
    train_labels: np.ndarray,
    test_vectors: np.ndarray,
    test_labels: np.ndarray,
    prefix_dims: list[int],
    k: int = 5,
) -> EmbeddingEvaluation:
    """k-NN accuracy (``k`` neighbours, majority vote), Recall@1 and steerability of embeddings."""
    _check_inputs(train_vectors, train_labels, test_vectors, test_labels, prefix_dims)
    knn = knn_accuracy_table(
        train_vectors, train_labels, test_vectors, test_labels, prefix_dims, k=k
    )
    return EmbeddingEvaluation(
        prefix_dims=list(prefix_dims),
        k=k,
        knn_accuracy=knn,
        recall_at_1=recall_at_1_table(
            train_vectors, train_labels, test_vectors, test_labels, prefix_dims
        ),
        steerability=SteerabilityScores.from_table(knn),
    )
