"""Retrieval Recall@1 per label level and prefix (V5 paper, §7 and Table 7).

Each test vector is a query against the training vectors as the corpus. Its single nearest
neighbour, by cosine on the L2-normalised prefix, is a hit at a level when it carries the query's
label at that level. With one relevant class per level this is 1-NN label agreement.
"""

from __future__ import annotations

import numpy as np

from training.evaluation.knn import prefix_neighbours


def recall_at_1_table(
    train_vectors: np.ndarray,
    train_labels: np.ndarray,
    test_vectors: np.ndarray,
    test_labels: np.ndarray,
    prefix_dims: list[int],
) -> np.ndarray:
    """Recall@1 ``[level, prefix]``: the fraction of queries whose nearest neighbour shares the
    query's label at that level, on each prefix."""
    table = np.zeros((train_labels.shape[1], len(prefix_dims)))
    for column, dim in enumerate(prefix_dims):
        nearest = prefix_neighbours(train_vectors, test_vectors, dim, 1)[:, 0]
        table[:, column] = np.mean(train_labels[nearest] == test_labels, axis=0)
    return table
