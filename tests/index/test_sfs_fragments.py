"""Boundary checks and normalisation: the cosine prefix map and the SFS fragment map."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from index.fragments import fragment_unit
from index.vectors import as_matrix, prefix_unit, unit_rows

FragmentScores = Callable[[np.ndarray, np.ndarray, int], np.ndarray]


@pytest.mark.parametrize("fragment_dim", [4, 16, 64])
def test_inner_product_of_fragment_maps_is_mean_fragment_cosine(
    rng: np.random.Generator, mean_fragment_cosine: FragmentScores, fragment_dim: int
) -> None:
    docs = rng.standard_normal((50, 64)) * rng.uniform(0.1, 10, size=(50, 64))
    query = rng.standard_normal(64)
    mapped_docs = fragment_unit(docs.astype(np.float32), 64, fragment_dim)
    mapped_query = fragment_unit(query[None, :].astype(np.float32), 64, fragment_dim)[0]
    expected = mean_fragment_cosine(query, docs, fragment_dim)
    np.testing.assert_allclose(mapped_docs @ mapped_query, expected, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(mapped_docs, axis=1), 1.0, atol=1e-5)


def test_fragment_map_of_a_prefix_uses_only_the_prefix(rng: np.random.Generator) -> None:
    vectors = rng.standard_normal((3, 64)).astype(np.float32)
    np.testing.assert_allclose(
        fragment_unit(vectors, 32, 8), fragment_unit(vectors[:, :32].copy(), 32, 8), atol=1e-7
    )


@pytest.mark.parametrize("fragment_dim", [0, 5, 100])
def test_fragment_dim_must_divide_the_dimension(fragment_dim: int) -> None:
    with pytest.raises(ValueError, match="must be a positive divisor of the dimension 64"):
        fragment_unit(np.ones((1, 64), np.float32), 64, fragment_dim)


def test_prefix_unit_normalises_the_prefix_and_leaves_zero_rows_zero() -> None:
    vectors = np.array([[3.0, 4.0, 100.0], [0.0, 0.0, 1.0]], np.float32)
    np.testing.assert_allclose(prefix_unit(vectors, 2), [[0.6, 0.8], [0.0, 0.0]])
    assert unit_rows(vectors).dtype == np.float32


def test_as_matrix_returns_contiguous_float32_and_accepts_one_row() -> None:
    matrix = as_matrix(np.arange(12, dtype=np.float64).reshape(3, 4)[:, ::-1], (4,))
    assert matrix.dtype == np.float32 and matrix.flags.c_contiguous
    assert as_matrix([1, 2, 3, 4], (4,)).shape == (1, 4)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (np.ones((2, 5)), r"must have shape \(n, 4\), got \(2, 5\)"),
        (np.ones((2, 2, 4)), r"must have shape"),
        (np.ones((0, 4)), "is empty"),
        (np.array([[1, 2, 3, 4], [1, np.nan, 3, 4]]), "row 1 contains NaN"),
        (np.array([[1, 2, 3, np.inf]]), "row 0 contains NaN or infinite"),
        ([["a", "b", "c", "d"]], "must be an array of numbers"),
    ],
)
def test_as_matrix_rejects_bad_input_with_a_message(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        as_matrix(value, (4,), "vectors")
