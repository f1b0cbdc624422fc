"""Finite scalar quantisation (Mentzer et al., ICLR 2024): the MSHC paper's other named
alternative to its VQ stage (§5.3).

A linear map down to ``latent_dim`` coordinates, each bounded by ``h · tanh(·)`` with
``h = (L − 1) / 2`` for an odd number of levels ``L``, rounded to the nearest integer (gradient
passed straight through), and a linear map back up. No codebook to collapse: the implicit
codebook is the grid ``{−h..h}^latent_dim``, ``latent_dim · log2 L`` bits per vector. Trained to
reconstruct its input (mean squared error).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from training.fitting import fit


def round_straight_through(z: torch.Tensor) -> torch.Tensor:
    """``round(z)`` forward, identity backward."""
    return z + (torch.round(z) - z).detach()


class FiniteScalarQuantizer(nn.Module):
    """``dim → latent_dim`` grid of ``levels`` values per coordinate ``→ dim``."""

    def __init__(self, dim: int, latent_dim: int, levels: int) -> None:
        super().__init__()
        if levels < 3 or levels % 2 == 0:
            raise ValueError(f"FSQ levels must be odd and >= 3, got {levels}")
        self.levels = levels
        self.latent_dim = latent_dim
        self.down = nn.Linear(dim, latent_dim)
        self.up = nn.Linear(latent_dim, dim)

    def bound(self, x: torch.Tensor) -> torch.Tensor:
        return (self.levels - 1) / 2 * torch.tanh(self.down(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Quantised reconstruction, differentiable through the straight-through rounding."""
        return self.up(round_straight_through(self.bound(x)))

    @torch.no_grad()
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Integer grid coordinates shifted to ``0..L−1`` (int64, ``[n, latent_dim]``)."""
        return torch.round(self.bound(x)).long() + (self.levels - 1) // 2

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        return self.up((codes - (self.levels - 1) // 2).float())

    def quantize(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(x))

    def bytes_per_vector(self) -> int:
        """Bytes of the codes packed as one mixed-radix integer."""
        return math.ceil(self.latent_dim * math.log2(self.levels) / 8)


def train_fsq(
    x: torch.Tensor,
    *,
    latent_dim: int = 24,
    levels: int = 7,
    epochs: int = 40,
    batch_size: int = 256,
    learning_rate: float = 3e-3,
    seed: int = 42,
    progress: bool = False,
) -> FiniteScalarQuantizer:
    torch.manual_seed(seed)
    fsq = FiniteScalarQuantizer(x.shape[1], latent_dim, levels)
    fit(
        fsq.parameters(),
        len(x),
        lambda rows, _epoch: (fsq(x[rows]) - x[rows]).pow(2).sum(1).mean(),
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        seed=seed,
        desc=f"fsq {latent_dim}x{levels}",
        progress=progress,
    )
    return fsq.eval()
