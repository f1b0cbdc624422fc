"""MSHC stage 3: product quantisation (MSHC paper, §3.4; Jégou et al., 2011), with FAISS.

``M = 8`` sub-vectors (12-d for a 96-d input), each replaced by the index of the nearest of
``2^nbits = 256`` sub-centroids: 8 bytes per vector. The codebooks ``[M, 2^nbits, dim / M]`` are
what a bundle ships, so that the service encodes its documents with exactly these centroids.
"""

from __future__ import annotations

import faiss
import numpy as np

PAPER_M = 8
PAPER_NBITS = 8


class ProductQuantizer:
    """A thin wrapper over ``faiss.ProductQuantizer`` on float32 ``[n, dim]`` arrays."""

    def __init__(self, dim: int, m: int = PAPER_M, nbits: int = PAPER_NBITS) -> None:
        if dim % m:
            raise ValueError(f"PQ m={m} must divide the dimension {dim}")
        self.dim, self.m, self.nbits = dim, m, nbits
        self._pq = faiss.ProductQuantizer(dim, m, nbits)

    @classmethod
    def trained(cls, x: np.ndarray, m: int = PAPER_M, nbits: int = PAPER_NBITS) -> ProductQuantizer:
        pq = cls(x.shape[1], m, nbits)
        pq._pq.train(_float32(x, pq.dim))
        return pq

    @property
    def codebooks(self) -> np.ndarray:
        """``[m, 2^nbits, dim / m]`` float32 sub-centroids."""
        centroids = faiss.vector_to_array(self._pq.centroids)
        return centroids.reshape(self.m, 2**self.nbits, self.dim // self.m).astype(np.float32)

    def encode(self, x: np.ndarray) -> np.ndarray:
        """``[n, code_size]`` uint8 codes (``code_size = ceil(m · nbits / 8)``)."""
        return self._pq.compute_codes(_float32(x, self.dim))

    def decode(self, codes: np.ndarray) -> np.ndarray:
        return self._pq.decode(np.ascontiguousarray(codes, dtype=np.uint8))

    def quantize(self, x: np.ndarray) -> np.ndarray:
        return self.decode(self.encode(x))

    def bytes_per_vector(self) -> int:
        return int(self._pq.code_size)


def _float32(x: np.ndarray, dim: int) -> np.ndarray:
    array = np.ascontiguousarray(x, dtype=np.float32)
    if array.ndim != 2 or array.shape[1] != dim:
        raise ValueError(f"expected a [n, {dim}] matrix, got shape {array.shape}")
    return array
