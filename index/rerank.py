"""The exact re-rank of C2F, shared by both backends: each query's shortlist scored by
inner product of full unit vectors, best ``k`` first."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def rerank(
    queries: np.ndarray, shortlists: Iterable[np.ndarray], k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` of each query's shortlist.

    ``queries`` are full unit vectors, one per row; ``shortlists`` gives, per query, the full
    unit vectors of its shortlisted documents as an ``(n, dim)`` float32 matrix (``n`` may be
    0; it is consumed one query at a time, so a generator holds one shortlist at a time). Ties
    keep shortlist order. Returns ``(scores, positions)``, each ``(queries, k)``: the best
    inner products, best first, and their positions in the query's shortlist; a query with
    fewer than ``k`` candidates is padded with ``-inf`` and ``-1``.
    """
    best_scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
    best_positions = np.full((len(queries), k), -1, dtype=np.int64)
    for i, (query, vectors) in enumerate(zip(queries, shortlists, strict=True)):
        if not len(vectors):
            continue
        scores = vectors @ query
        best = np.argsort(-scores, kind="stable")[:k]
        best_scores[i, : len(best)], best_positions[i, : len(best)] = scores[best], best
    return best_scores, best_positions
