"""Metrics of a compressed embedding against the original (MSHC paper, §4.3 and §4.9).

- Spearman ρ of pairwise distances (Metric 1): cosine distances of the same random pairs in the
  original and in the compressed space, rank-correlated; 1.0 means the distance order survived.
- MRR@10 (Metric 3): each test utterance queries the training utterances; relevant are those of
  the same label; ``1 / rank`` of the first relevant hit in the top 10, else 0, averaged.
- Coarse-to-fine MRR@10 (§4.9): shortlist ``k`` candidates in a cheap space, re-rank them by
  cosine in the full space, score the re-ranked top 10.
- Fine-tuning recovery (Metric 4): a small adapter trained on a slice of the training data, on
  top of the compressed vectors.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy import stats
from torch import nn

from training.evaluation.knn import nearest_neighbours, normalize_prefix
from training.fitting import fit

MRR_CUTOFF = 10


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Every row scaled to unit length (all columns kept)."""
    return normalize_prefix(vectors, vectors.shape[1])


def random_pairs(n: int, num_pairs: int, seed: int = 42) -> np.ndarray:
    """``[num_pairs, 2]`` index pairs ``i ≠ j`` drawn uniformly from ``range(n)``."""
    if n < 2:
        raise ValueError("pairs need at least two vectors")
    generator = np.random.default_rng(seed)
    first = generator.integers(0, n, num_pairs)
    second = (first + generator.integers(1, n, num_pairs)) % n
    return np.stack([first, second], axis=1)


def pair_distances(vectors: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """Cosine distance ``1 − cos`` of each pair."""
    unit = unit_rows(vectors)
    return 1.0 - np.sum(unit[pairs[:, 0]] * unit[pairs[:, 1]], axis=1)


def distance_spearman(original: np.ndarray, compressed: np.ndarray, pairs: np.ndarray) -> float:
    """Spearman ρ between the pairs' distances before and after compression."""
    if len(original) != len(compressed):
        raise ValueError("original and compressed must hold the same rows")
    rho = stats.spearmanr(pair_distances(original, pairs), pair_distances(compressed, pairs))
    return float(rho.statistic)


def reciprocal_ranks(ranked_labels: np.ndarray, query_labels: np.ndarray) -> np.ndarray:
    """``1 / rank`` of the first column equal to the query's label (within the given columns,
    at most :data:`MRR_CUTOFF`), else 0; one value per row."""
    hits = ranked_labels[:, :MRR_CUTOFF] == query_labels[:, None]
    first = np.argmax(hits, axis=1)
    return np.where(hits.any(axis=1), 1.0 / (first + 1), 0.0)


def mrr_at_10(
    corpus: np.ndarray, corpus_labels: np.ndarray, queries: np.ndarray, query_labels: np.ndarray
) -> float:
    """MRR@10 by cosine over all columns of ``corpus`` and ``queries``."""
    top = nearest_neighbours(unit_rows(queries), unit_rows(corpus), MRR_CUTOFF)
    return float(reciprocal_ranks(corpus_labels[top], query_labels).mean())


def rerank(candidates: np.ndarray, corpus: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Candidate ids ``[n, k]`` (``-1`` = none) re-ordered by exact cosine in the full space."""
    corpus_unit, query_unit = unit_rows(corpus), unit_rows(queries)
    safe = np.where(candidates < 0, 0, candidates)
    scores = np.einsum("qkd,qd->qk", corpus_unit[safe], query_unit)
    scores[candidates < 0] = -np.inf
    order = np.argsort(-scores, axis=1, kind="stable")
    return np.take_along_axis(candidates, order, axis=1)


def c2f_mrr_at_10(
    coarse_corpus: np.ndarray,
    coarse_queries: np.ndarray,
    full_corpus: np.ndarray,
    full_queries: np.ndarray,
    corpus_labels: np.ndarray,
    query_labels: np.ndarray,
    shortlist: int,
) -> float:
    """Shortlist ``shortlist`` by cosine in the coarse space, re-rank at full, MRR@10."""
    candidates = nearest_neighbours(unit_rows(coarse_queries), unit_rows(coarse_corpus), shortlist)
    return shortlist_mrr_at_10(candidates, full_corpus, full_queries, corpus_labels, query_labels)


def shortlist_mrr_at_10(
    candidates: np.ndarray,
    full_corpus: np.ndarray,
    full_queries: np.ndarray,
    corpus_labels: np.ndarray,
    query_labels: np.ndarray,
) -> float:
    """MRR@10 of any shortlist (e.g. from a PQ index) after exact re-ranking at full."""
    ranked = rerank(candidates, full_corpus, full_queries)
    labels = np.where(ranked < 0, -1, corpus_labels[np.where(ranked < 0, 0, ranked)])
    return float(reciprocal_ranks(labels, query_labels).mean())


class Adapter(nn.Module):
    """The paper's task adapter (§4.7.4): a 2-layer MLP ``input → 128 → 128`` and a linear
    classification head."""

    def __init__(self, input_dim: int, num_classes: int, hidden: int = 128) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(input_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.classifier = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.body(x))


def adapter_accuracy(
    train_vectors: np.ndarray,
    train_labels: np.ndarray,
    test_vectors: np.ndarray,
    test_labels: np.ndarray,
    *,
    fraction: float = 0.1,
    epochs: int = 20,
    batch_size: int = 32,
    learning_rate: float = 1e-3,
    seed: int = 42,
) -> float:
    """Test accuracy of an :class:`Adapter` trained on a random ``fraction`` of the training
    rows (cross-entropy, Adam, batch 32, ``epochs`` epochs) over unit-normalised inputs."""
    generator = np.random.default_rng(seed)
    rows = generator.permutation(len(train_vectors))[: max(2, int(fraction * len(train_vectors)))]
    x = torch.from_numpy(unit_rows(train_vectors[rows]))
    y = torch.from_numpy(np.asarray(train_labels[rows], dtype=np.int64))
    num_classes = int(max(train_labels.max(), test_labels.max())) + 1
    torch.manual_seed(seed)
    adapter = Adapter(x.shape[1], num_classes)
    fit(
        adapter.parameters(),
        len(x),
        lambda batch, _epoch: nn.functional.cross_entropy(adapter(x[batch]), y[batch]),
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        seed=seed,
    )
    with torch.no_grad():
        predicted = adapter(torch.from_numpy(unit_rows(test_vectors))).argmax(1).numpy()
    return float(np.mean(predicted == test_labels))
