"""The single-step compressions the MSHC paper compares against (its Table 10), applied to the
frozen encoder's own vectors: random projection and PCA to the coarse dimension, binary and
int8 scalar quantisation of the full vector, and PQ of the full vector (8 bytes).

Each returns reconstructed (or projected) float vectors to score by cosine, and its bytes per
vector. Projections and quantiser ranges are fitted on the training vectors only.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from training.mshc.pq import PAPER_M, PAPER_NBITS, ProductQuantizer

Baseline = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, int]]
FLOAT_BYTES = 4


def random_projection(dim: int, seed: int = 42) -> Baseline:
    def apply(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        matrix = np.random.default_rng(seed).standard_normal((train.shape[1], dim)) / dim**0.5
        return train @ matrix, test @ matrix, FLOAT_BYTES * dim

    return apply


def pca(dim: int) -> Baseline:
    def apply(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        mean = train.mean(0)
        _, _, components = np.linalg.svd(train - mean, full_matrices=False)
        basis = components[:dim].T
        return (train - mean) @ basis, (test - mean) @ basis, FLOAT_BYTES * dim

    return apply


def binary(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """One bit per coordinate: the sign around the training mean, as ±1."""
    mean = train.mean(0)
    return np.sign(train - mean), np.sign(test - mean), int(np.ceil(train.shape[1] / 8))


def scalar_int8(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Each coordinate to 256 levels between its training minimum and maximum."""
    low, high = train.min(0), train.max(0)
    step = np.maximum(high - low, 1e-12) / 255

    def round_trip(x: np.ndarray) -> np.ndarray:
        return low + np.clip(np.round((x - low) / step), 0, 255) * step

    return round_trip(train), round_trip(test), train.shape[1]


def pq_only(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    pq = ProductQuantizer.trained(train, PAPER_M, PAPER_NBITS)
    return pq.quantize(train), pq.quantize(test), pq.bytes_per_vector()


def baselines(coarse_dim: int, seed: int = 42) -> dict[str, Baseline]:
    return {
        f"random projection {coarse_dim}-d": random_projection(coarse_dim, seed),
        f"PCA {coarse_dim}-d": pca(coarse_dim),
        "binary quantisation": binary,
        "scalar int8": scalar_int8,
        f"PQ only (m={PAPER_M})": pq_only,
    }
