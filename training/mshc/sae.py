"""MSHC stage 4: sparse autoencoder (MSHC paper, §3.5, Eq. 6; Makhzani & Frey, 2014).

``96 → 512 → 32`` encoder (ReLU after each layer, so the code is non-negative and can be exactly
zero) and a mirrored ``32 → 512 → 96`` decoder.
``L_SAE = L_recon + λ · L_sparsity`` with ``L_recon = ‖x − x̂‖²`` and ``L_sparsity = ‖z‖₁``, both
per vector and averaged over the batch, λ = 0.01.
"""

from __future__ import annotations

import torch
from torch import nn

from training.fitting import fit

PAPER_HIDDEN = 512
PAPER_CODE_DIM = 32
PAPER_SPARSITY = 0.01


def sae_loss(
    x: torch.Tensor, reconstruction: torch.Tensor, code: torch.Tensor, sparsity: float
) -> torch.Tensor:
    """Eq. 6."""
    return ((x - reconstruction).pow(2).sum(1) + sparsity * code.abs().sum(1)).mean()


class SparseAutoencoder(nn.Module):
    def __init__(
        self, dim: int, hidden: int = PAPER_HIDDEN, code_dim: int = PAPER_CODE_DIM
    ) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, code_dim), nn.ReLU()
        )
        self.decoder = nn.Sequential(
            nn.Linear(code_dim, hidden), nn.ReLU(), nn.Linear(hidden, dim)
        )
        self.code_dim = code_dim

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(reconstruction, code)``."""
        code = self.encoder(x)
        return self.decoder(code), code

    def loss(self, x: torch.Tensor, sparsity: float = PAPER_SPARSITY) -> torch.Tensor:
        reconstruction, code = self(x)
        return sae_loss(x, reconstruction, code, sparsity)


def train_sae(
    x: torch.Tensor,
    *,
    sparsity: float = PAPER_SPARSITY,
    epochs: int = 30,
    batch_size: int = 128,
    learning_rate: float = 1e-3,
    seed: int = 42,
    progress: bool = False,
) -> SparseAutoencoder:
    torch.manual_seed(seed)
    sae = SparseAutoencoder(x.shape[1])
    fit(
        sae.parameters(),
        len(x),
        lambda rows, _epoch: sae.loss(x[rows], sparsity),
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        seed=seed,
        desc="sae",
        progress=progress,
    )
    return sae.eval()


def zero_fraction(code: torch.Tensor) -> float:
    """Share of exactly-zero code entries: the SAE's sparsity."""
    return float((code == 0).float().mean())
