"""Prefix embeddings: which dimensions a request may ask for, and the vectors it gets.

A bundle serves the prefixes it was trained for (``manifest.prefix_dims``, which the request
models check with :class:`service.limits.PrefixDims`). Each prefix is cut from the full vector
and L2-normalised on its own (:func:`index.vectors.prefix_unit`), or, with ``normalize=False``,
returned as the raw slice.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

import numpy as np

from bundle import Manifest
from index.vectors import prefix_unit
from service.errors import InvalidRequest


def resolve_dims(
    manifest: Manifest,
    dims: int | Sequence[int] | None,
    granularity: str | None,
    param: str = "dims",
) -> list[int]:
    """The prefix dimensions to return: ``dims`` as given, the one ``granularity`` names, or
    the full dimension when neither is given. That each of ``dims`` is a trained prefix, once,
    is the request model's rule (:class:`service.limits.PrefixDims`)."""
    if dims is not None and granularity is not None:
        raise InvalidRequest("give dims or granularity, not both", param)
    if granularity is not None:
        return [manifest.granularity[granularity]]
    if dims is None:
        return [manifest.dim]
    return [dims] if isinstance(dims, int) else list(dims)


def prefix_vectors(vectors: np.ndarray, dim: int, normalize: bool = True) -> np.ndarray:
    """The ``dim`` prefix of each full vector: re-normalised, or the raw slice."""
    if normalize:
        return prefix_unit(vectors, dim)
    return np.ascontiguousarray(vectors[:, :dim], dtype=np.float32)


def base64_float32(vector: np.ndarray) -> str:
    """A vector as base64 of its little-endian float32 bytes (OpenAI's ``encoding_format``)."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
