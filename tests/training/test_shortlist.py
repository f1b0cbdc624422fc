"""The C2F shortlist measurement: recall@10 as a naive loop computes it, and the prefix chosen
on synthetic embeddings whose answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from training.evaluation.shortlist import (
    CHOICE_FACTOR,
    RECALL_TARGET,
    SHORTLIST_FACTORS,
    K,
    measure_shortlist,
)

DOCUMENTS = 2000
QUERIES = 100
BLOCK = 8
PREFIX_DIMS = [8, 16, 24]
TINY = 1e-3


def _gaussian(seed: int, rows: int, columns: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, columns)).astype(np.float32)


def _embeddings(make_row_blocks) -> tuple[np.ndarray, np.ndarray]:
    """Corpus and queries of three 8-d blocks each, from ``make_row_blocks(seed, rows)``."""
    return make_row_blocks(0, DOCUMENTS), make_row_blocks(1, QUERIES)


def _unit(matrix: np.ndarray) -> np.ndarray:
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def _naive_recall(corpus: np.ndarray, queries: np.ndarray, dim: int, shortlist: int) -> float:
    full = _unit(queries) @ _unit(corpus).T
    prefix = _unit(queries[:, :dim]) @ _unit(corpus[:, :dim]).T
    found = 0
    for full_row, prefix_row in zip(full, prefix, strict=True):
        candidates = np.argsort(-prefix_row)[:shortlist]
        reranked = candidates[np.argsort(-full_row[candidates])][:K]
        found += len(set(reranked) & set(np.argsort(-full_row)[:K]))
    return found / (K * len(queries))


def test_recall_equals_a_naive_loop_over_the_queries() -> None:
    corpus, queries = _gaussian(0, 300, 24), _gaussian(1, 37, 24)
    measured = measure_shortlist(corpus, queries, PREFIX_DIMS, chunk=16)
    assert measured.shortlist_ks == tuple(K * factor for factor in SHORTLIST_FACTORS)
    assert measured.choice_k == K * CHOICE_FACTOR
    assert [row.dim for row in measured.rows] == [8, 16]  # prefixes below the full one
    for row in measured.rows:
        for size, recall in zip(measured.shortlist_ks, row.recall, strict=True):
            assert recall == pytest.approx(_naive_recall(corpus, queries, row.dim, size))
    # Random 24-d vectors: the 16-d prefix is a better shortlist than the 8-d one, neither enough.
    assert measured.rows[0].recall[1] < measured.rows[1].recall[1] < RECALL_TARGET
    assert measured.shortlist_dim == 24 and not measured.reached


def test_a_first_prefix_that_decides_the_neighbours_is_chosen() -> None:
    """The signal is in the first 8 dims; the rest is noise too small to move a cosine."""

    def rows(seed: int, count: int) -> np.ndarray:
        signal, noise = _gaussian(seed, count, BLOCK), _gaussian(seed + 10, count, 2 * BLOCK)
        return np.hstack([signal, TINY * noise])

    measured = measure_shortlist(*_embeddings(rows), PREFIX_DIMS, first_stage=False)
    assert measured.shortlist_dim == 8 and measured.reached
    assert all(value >= RECALL_TARGET for row in measured.rows for value in row.recall)


def test_a_noise_first_prefix_makes_a_larger_prefix_the_shortlist() -> None:
    """The first 8 dims are (small) noise; the next 8 carry the signal, which the last 8 repeat.
    Each prefix is normalised on its own, so the 8-d one is pure noise however small."""

    def rows(seed: int, count: int) -> np.ndarray:
        signal = _gaussian(seed, count, BLOCK)
        return np.hstack([TINY * _gaussian(seed + 10, count, BLOCK), signal, signal])

    measured = measure_shortlist(*_embeddings(rows), PREFIX_DIMS, first_stage=False)
    noise_row, signal_row = measured.rows
    # Pure noise: about the chance of a random shortlist, k′ / documents.
    assert noise_row.recall[1] < 0.2
    assert signal_row.recall[1] >= RECALL_TARGET
    assert measured.shortlist_dim == 16


def test_no_prefix_reaching_the_target_leaves_the_full_dimension() -> None:
    """Only the last 8 dims carry the signal: both smaller prefixes are pure noise."""

    def rows(seed: int, count: int) -> np.ndarray:
        noise = TINY * _gaussian(seed + 10, count, 2 * BLOCK)
        return np.hstack([noise, _gaussian(seed, count, BLOCK)])

    measured = measure_shortlist(*_embeddings(rows), PREFIX_DIMS, first_stage=False)
    assert measured.shortlist_dim == 24 and not measured.reached
    record = measured.to_json()
    assert record["shortlist_dim"] == 24 and [r["dim"] for r in record["recall_at_k"]] == [8, 16]
    text = "\n".join(measured.markdown())
    assert "## C2F shortlist" in text and "plain search at the full dimension" in text


def test_bad_shapes_are_refused() -> None:
    corpus = _gaussian(0, 50, 24)
    with pytest.raises(ValueError, match="same dim"):
        measure_shortlist(corpus, _gaussian(1, 5, 16), PREFIX_DIMS)
    with pytest.raises(ValueError, match="ascend"):
        measure_shortlist(corpus, _gaussian(1, 5, 24), [16, 8, 24])
