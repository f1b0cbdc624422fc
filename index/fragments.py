"""Semantic Fragment Similarity (SFS) as an ordinary inner product.

SFS (``papers/sfs-semantic-fragment-similarity.txt``, section 2.2, equation 3) scores a query
``q`` against a document ``d`` by cutting both into ``n`` fragments of ``fragment_dim`` values and
averaging the fragment cosines::

    S_frag(q, d) = (1/n) * sum_i cos(q_i, d_i)

Write ``u(x)`` for ``x / ||x||``. Map a vector to ``x_hat = [u(x_1), ..., u(x_n)] / sqrt(n)``. The
inner product splits over fragments, so::

    <q_hat, d_hat> = sum_i <u(q_i), u(d_i)> / (sqrt(n) * sqrt(n)) = (1/n) * sum_i cos(q_i, d_i)

which is ``S_frag``. Documents and queries are both mapped this way, and a FAISS inner-product
index over the mapped vectors ranks and scores by SFS with no extra cost per query.
"""

from __future__ import annotations

import numpy as np

from index.vectors import prefix_unit, unit_rows


def check_fragment_dim(dim: int, fragment_dim: int) -> None:
    """Raise :class:`ValueError` unless ``fragment_dim`` is positive and divides ``dim``."""
    if fragment_dim <= 0 or dim % fragment_dim:
        raise ValueError(
            f"fragment_dim {fragment_dim} must be a positive divisor of the dimension {dim}"
        )


def fragment_unit(matrix: np.ndarray, dim: int, fragment_dim: int) -> np.ndarray:
    """The first ``dim`` columns of each row, mapped so that inner products are SFS scores.

    Every fragment of ``fragment_dim`` columns is L2-normalised on its own (a zero fragment stays
    zero) and the row is divided by ``sqrt(dim / fragment_dim)``.
    """
    check_fragment_dim(dim, fragment_dim)
    num_fragments = dim // fragment_dim
    fragments = unit_rows(matrix[:, :dim].reshape(-1, fragment_dim))
    scaled = fragments.reshape(matrix.shape[0], dim) / np.float32(np.sqrt(num_fragments))
    return np.ascontiguousarray(scaled, np.float32)


def in_space(scoring: str, dim: int, matrix: np.ndarray, fragment_dim: int | None) -> np.ndarray:
    """Vectors (full, or already cut to ``dim``) in the space of a ``scoring`` index at the
    ``dim`` prefix: cosine (the prefix, L2-normalised) or SFS (:func:`fragment_unit`)."""
    if scoring == "cosine":
        return prefix_unit(matrix, dim)
    if fragment_dim is None:
        raise ValueError("sfs scoring needs a collection opened with a fragment_dim")
    return fragment_unit(matrix, dim, fragment_dim)
