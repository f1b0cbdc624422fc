"""Retrieval by label: Recall@1, Recall@10 and MRR@10, scored by global cosine or by SFS.

Each test text queries the training texts; a retrieved text is relevant when it has the query's
(finest) label. With many relevant texts per query, Recall@k is the fraction of queries with at
least one relevant text in their top ``k`` (Recall@1 is then the existing 1-NN label agreement),
and MRR@10 the mean of ``1/rank`` of the first relevant text within the top 10 (0 if none).

Scoring: global cosine (L2-normalised vectors), or SFS with a fragment size — every fragment
normalised, row scaled by ``1/sqrt(N_f)`` (``index.fragments.fragment_unit``, the function the
service's indexes use), so an inner product is the mean of fragment cosines.
"""

from __future__ import annotations

import numpy as np

from index.fragments import fragment_unit
from training.evaluation.knn import nearest_neighbours, normalize_prefix

RANKING_DEPTH = 10


def ranking_metrics(
    train_vectors: np.ndarray,
    train_labels: np.ndarray,
    test_vectors: np.ndarray,
    test_labels: np.ndarray,
    *,
    fragment_dim: int | None = None,
) -> dict[str, float]:
    """``{"recall@1", "recall@10", "mrr@10"}`` of the test texts against the training texts."""
    dim = train_vectors.shape[1]
    if fragment_dim is None:
        corpus, queries = normalize_prefix(train_vectors, dim), normalize_prefix(test_vectors, dim)
    else:
        corpus = fragment_unit(train_vectors, dim, fragment_dim)
        queries = fragment_unit(test_vectors, dim, fragment_dim)
    top = nearest_neighbours(queries, corpus, RANKING_DEPTH)
    relevant = train_labels[top] == test_labels[:, None]
    first = np.where(relevant.any(axis=1), relevant.argmax(axis=1) + 1, 0)
    reciprocal = np.where(first > 0, 1.0 / np.maximum(first, 1), 0.0)
    return {
        "recall@1": float(relevant[:, 0].mean()),
        "recall@10": float(relevant.any(axis=1).mean()),
        "mrr@10": float(reciprocal.mean()),
    }
