"""MSHC stage 2: soft-to-hard vector quantisation (MSHC paper, §3.3, Eqs. 3–5).

- Eq. 3, temperature annealing: ``τ(t) = τ0 · (τf / τ0)^(t / T)``, τ0 = 1.0 → τf = 0.1.
- Eq. 4, soft assignment: ``p(k | x) = softmax_k(−‖x − c_k‖² / τ)``.
- Eq. 5, loss: ``‖E − C[i*]‖² + β‖sg(E) − C[i*]‖² + β‖E − sg(C[i*])‖²`` with β = 0.25.

Where the paper is vague (how the temperature enters Eq. 5) we choose: the first
(reconstruction) term uses the *soft* quantised vector ``q = Σ_k p(k | x) c_k``, which is how every
codeword gets a gradient early on and turns into ``C[i*]`` as τ → 0; the codebook and commitment
terms use the hard nearest codeword ``i*``. At inference the code is always the hard ``i*``
(one byte for K = 256). The paper does not say how the codebook starts; we start it from
10 k-means iterations (FAISS).
"""

from __future__ import annotations

import faiss
import numpy as np
import torch
from torch import nn

from training.fitting import fit

PAPER_CODEBOOK_SIZE = 256
PAPER_TAU_START = 1.0
PAPER_TAU_END = 0.1
PAPER_BETA = 0.25
PAPER_EPOCHS = 100
KMEANS_ITERATIONS = 10


def annealed_temperature(
    epoch: float, total_epochs: float, start: float = PAPER_TAU_START, end: float = PAPER_TAU_END
) -> float:
    """Eq. 3: exponential decay from ``start`` at epoch 0 to ``end`` at ``total_epochs``."""
    if total_epochs <= 0:
        raise ValueError("total_epochs must be positive")
    return start * (end / start) ** (epoch / total_epochs)


def squared_distances(x: torch.Tensor, codebook: torch.Tensor) -> torch.Tensor:
    """``‖x_i − c_k‖²`` for every row of ``x`` and codeword, ``[n, K]``."""
    return (
        x.pow(2).sum(1, keepdim=True) - 2 * x @ codebook.T + codebook.pow(2).sum(1)[None, :]
    ).clamp(min=0)


def soft_assignment(x: torch.Tensor, codebook: torch.Tensor, temperature: float) -> torch.Tensor:
    """Eq. 4: ``p(k | x)``, ``[n, K]``, each row summing to one."""
    return torch.softmax(-squared_distances(x, codebook) / temperature, dim=1)


def vq_loss(
    x: torch.Tensor, codebook: torch.Tensor, temperature: float, beta: float = PAPER_BETA
) -> torch.Tensor:
    """Eq. 5 (soft reconstruction term, see the module docstring), averaged over rows."""
    soft = soft_assignment(x, codebook, temperature) @ codebook
    nearest = codebook[squared_distances(x, codebook).argmin(1)]
    reconstruction = (x - soft).pow(2).sum(1)
    codebook_term = (x.detach() - nearest).pow(2).sum(1)
    commitment = (x - nearest.detach()).pow(2).sum(1)
    return (reconstruction + beta * codebook_term + beta * commitment).mean()


class SoftToHardVQ(nn.Module):
    """A learned codebook ``[K, dim]``; ``encode`` gives hard codes, ``decode`` their codewords."""

    def __init__(self, initial_codebook: torch.Tensor) -> None:
        super().__init__()
        self.codebook = nn.Parameter(initial_codebook.detach().clone().float())

    @classmethod
    def from_kmeans(
        cls, x: torch.Tensor, size: int = PAPER_CODEBOOK_SIZE, seed: int = 42
    ) -> SoftToHardVQ:
        """Initialise the codebook with ``size`` k-means centroids of ``x``."""
        if len(x) < size:
            raise ValueError(f"a codebook of {size} needs at least {size} training vectors")
        data = np.ascontiguousarray(x.detach().numpy(), dtype=np.float32)
        kmeans = faiss.Kmeans(
            data.shape[1], size, niter=KMEANS_ITERATIONS, seed=seed, min_points_per_centroid=1
        )
        kmeans.train(data)
        return cls(torch.from_numpy(kmeans.centroids))

    @property
    def size(self) -> int:
        return int(self.codebook.shape[0])

    def loss(self, x: torch.Tensor, temperature: float, beta: float = PAPER_BETA) -> torch.Tensor:
        return vq_loss(x, self.codebook, temperature, beta)

    @torch.no_grad()
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Index of the nearest codeword per row (int64)."""
        return squared_distances(x, self.codebook).argmin(1)

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        return self.codebook[codes]

    def quantize(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(x))

    def bytes_per_vector(self) -> int:
        return max(1, ((self.size - 1).bit_length() + 7) // 8)


def train_vq(
    x: torch.Tensor,
    *,
    size: int = PAPER_CODEBOOK_SIZE,
    epochs: int = PAPER_EPOCHS,
    batch_size: int = 256,
    learning_rate: float = 1e-2,
    seed: int = 42,
    progress: bool = False,
) -> SoftToHardVQ:
    """A codebook for the rows of ``x``, τ annealed per epoch by Eq. 3 over ``epochs``."""
    vq = SoftToHardVQ.from_kmeans(x, size, seed)
    fit(
        vq.parameters(),
        len(x),
        lambda rows, epoch: vq.loss(x[rows], annealed_temperature(epoch, epochs)),
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        seed=seed,
        desc=f"vq K={size}",
        progress=progress,
    )
    return vq.eval()
