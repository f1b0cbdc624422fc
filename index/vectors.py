"""Checking vectors at the package boundary and normalising them for cosine search.

Everything that enters ``index`` goes through :func:`as_matrix`: a ``float32``, C-contiguous,
two-dimensional array of finite numbers with the expected number of columns. Everything an
inner-product index holds goes through :func:`prefix_unit` (cosine) or
:func:`index.fragments.fragment_unit` (SFS).

Convention: a row (or fragment) whose norm is zero stays zero after normalisation, so its cosine
with anything is 0 rather than NaN.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_TINY = np.finfo(np.float32).tiny


def as_matrix(vectors: object, widths: Sequence[int], what: str = "vectors") -> np.ndarray:
    """``vectors`` as a float32, C-contiguous ``(n, width)`` matrix, with ``width`` in ``widths``.

    A one-dimensional array is taken as a single row. Raises :class:`ValueError`, naming ``what``,
    for a non-numeric array, a wrong shape, no rows, or a NaN or infinite value.
    """
    try:
        matrix = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must be an array of numbers: {exc}") from None
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    if matrix.ndim != 2 or matrix.shape[1] not in widths:
        allowed = " or ".join(str(width) for width in widths)
        raise ValueError(f"{what} must have shape (n, {allowed}), got {matrix.shape}")
    if matrix.shape[0] == 0:
        raise ValueError(f"{what} is empty: at least one row is needed")
    if not np.isfinite(matrix).all():
        row = int(np.flatnonzero(~np.isfinite(matrix).all(axis=1))[0])
        raise ValueError(f"{what} row {row} contains NaN or infinite values")
    return matrix if matrix.flags.c_contiguous else np.ascontiguousarray(matrix)


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Each row of ``matrix`` divided by its L2 norm (zero rows stay zero), as float32."""
    # np.linalg.norm's own sum, without its Python: the same float32 norms, a few µs less.
    norms = np.sqrt(np.add.reduce(matrix * matrix, axis=1, keepdims=True))
    return np.ascontiguousarray(matrix / np.maximum(norms, _TINY), np.float32)


def prefix_unit(matrix: np.ndarray, dim: int) -> np.ndarray:
    """The first ``dim`` columns of each row, re-normalised to unit length (cosine space)."""
    return unit_rows(matrix[:, :dim])
