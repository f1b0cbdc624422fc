"""Shared fixtures for the index tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import faiss
import numpy as np
import pytest


@pytest.fixture(autouse=True)
def single_threaded_faiss() -> Iterator[None]:
    """Run FAISS on one OpenMP thread: on a small shared machine, spinning OpenMP workers make
    training and graph building many times slower. Results do not depend on the thread count."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def _mean_fragment_cosine(query: np.ndarray, docs: np.ndarray, fragment_dim: int) -> np.ndarray:
    """SFS (paper, equation 3) computed directly: one cosine per fragment pair, averaged."""
    scores = np.zeros(len(docs))
    num_fragments = query.shape[0] // fragment_dim
    for i in range(num_fragments):
        part = slice(i * fragment_dim, (i + 1) * fragment_dim)
        q, d = query[part], docs[:, part]
        scores += (d @ q) / (np.linalg.norm(d, axis=1) * np.linalg.norm(q))
    return scores / num_fragments


@pytest.fixture
def mean_fragment_cosine() -> Callable[[np.ndarray, np.ndarray, int], np.ndarray]:
    """``f(query, docs, fragment_dim)``: each document's mean fragment cosine with the query."""
    return _mean_fragment_cosine
