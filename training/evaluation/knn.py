"""k-nearest-neighbour classification accuracy on cosine similarity, per prefix and level.

The paper's probe (§2): each test vector's ``k=5`` nearest training vectors, by cosine on the
L2-normalised prefix, vote (majority, ties to the nearest) for its label.
"""

from __future__ import annotations

import numpy as np


def normalize_prefix(vectors: np.ndarray, prefix_dim: int) -> np.ndarray:
    """First ``prefix_dim`` columns, each row scaled to unit length (zero rows stay zero)."""
    prefix = np.ascontiguousarray(vectors[:, :prefix_dim], dtype=np.float32)
    norms = np.linalg.norm(prefix, axis=1, keepdims=True)
    return prefix / np.maximum(norms, 1e-12)


def nearest_neighbours(
    queries: np.ndarray, corpus: np.ndarray, k: int, *, block: int = 1024
) -> np.ndarray:
    """Indices of the ``k`` most similar corpus rows for each query row, best first.

    Both inputs must already be normalised; similarity is the inner product.
    """
    k = min(k, len(corpus))
    out = np.empty((len(queries), k), dtype=np.int64)
    for start in range(0, len(queries), block):
        scores = queries[start : start + block] @ corpus.T
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        top_scores = np.take_along_axis(scores, top, axis=1)
        out[start : start + block] = np.take_along_axis(top, np.argsort(-top_scores, axis=1), 1)
    return out


def prefix_neighbours(
    train_vectors: np.ndarray, test_vectors: np.ndarray, prefix_dim: int, k: int
) -> np.ndarray:
    """``[n_test, k]`` indices of the nearest training rows, by cosine on one prefix.

    Both sides are cut to their first ``prefix_dim`` columns and L2-normalised per prefix.
    """
    return nearest_neighbours(
        normalize_prefix(test_vectors, prefix_dim), normalize_prefix(train_vectors, prefix_dim), k
    )


def vote(neighbour_labels: np.ndarray) -> np.ndarray:
    """Majority label per row; a tie goes to the label of the nearer neighbour."""
    predictions = np.empty(len(neighbour_labels), dtype=neighbour_labels.dtype)
    for row, labels in enumerate(neighbour_labels):
        values, first, counts = np.unique(labels, return_index=True, return_counts=True)
        best = counts == counts.max()
        predictions[row] = values[best][np.argmin(first[best])]
    return predictions


def knn_accuracy_table(
    train_vectors: np.ndarray,
    train_labels: np.ndarray,
    test_vectors: np.ndarray,
    test_labels: np.ndarray,
    prefix_dims: list[int],
    *,
    k: int = 5,
) -> np.ndarray:
    """Accuracy ``[level, prefix]`` of k-NN on each prefix, for every label level at once."""
    table = np.zeros((train_labels.shape[1], len(prefix_dims)))
    for column, dim in enumerate(prefix_dims):
        neighbours = prefix_neighbours(train_vectors, test_vectors, dim, k)
        for level in range(train_labels.shape[1]):
            predicted = vote(train_labels[neighbours, level])
            table[level, column] = float(np.mean(predicted == test_labels[:, level]))
    return table
