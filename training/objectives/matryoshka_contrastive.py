"""The Matryoshka contrastive loss: the task term of MIC and MIPIC and, alone, their matched MRL.

MIC paper, appendix A.2.1, Eq. 2 (Kusupati et al., 2022, with InfoNCE as the task loss): the same
contrastive loss on every nested prefix ``e_{1:m}``, ``m ∈ M``, averaged over ``M``:

    L_MRL = (1/|M|) Σ_m InfoNCE(ê_{1:m})

Both papers instantiate InfoNCE as unsupervised SimCSE (two dropout views of each sentence). Our
training sets are labelled intents, so the positives of an anchor are the other texts of the
batch with its label (supervised InfoNCE, :func:`~training.objectives.base.supervised_contrastive`)
at ``τ = 0.05`` (MIPIC, Table 6). MIC, MIPIC and this baseline share it exactly, so a difference
between them is caused by their extra terms alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from training.objectives.base import supervised_contrastive

CONTRASTIVE_TEMPERATURE = 0.05


class MatryoshkaContrastiveLoss(nn.Module):
    """Mean over the nested prefixes of supervised InfoNCE on the L2-normalised prefix."""

    def __init__(
        self, prefix_dims: Sequence[int], temperature: float = CONTRASTIVE_TEMPERATURE
    ) -> None:
        super().__init__()
        self.prefix_dims = list(prefix_dims)
        self.temperature = temperature

    def forward(self, embedding: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        losses = [
            supervised_contrastive(
                F.normalize(embedding[:, :dim], dim=-1), labels, self.temperature
            )
            for dim in self.prefix_dims
        ]
        return torch.stack(losses).mean()
