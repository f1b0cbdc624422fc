"""MSHC stage 1: weighted Matryoshka loss (MSHC paper, Eq. 2 and Table 5; Kusupati et al., 2022).

``L_MRL = Σ_{d ∈ D} w_d · L_task(E[:d])`` summed over every nested dimension at every step (not a
sampled prefix as in :mod:`training.objectives.mrl`). ``L_task`` is the cross-entropy of the
head's cosine classifier for the finest label, read from the L2-normalised prefix ``E[:d]``.
The weights are Table 5's for the same dimensions (768: .5, 512: .6, 384: .8, 256: 1.0,
192: 1.2, 96: 1.5): higher for smaller prefixes. MiniLM is 384-d, so ``D = {96, 192, 256, 384}``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from training.head import FractalHead

PAPER_DIM_WEIGHTS = {768: 0.5, 512: 0.6, 384: 0.8, 256: 1.0, 192: 1.2, 96: 1.5}
MSHC_PREFIX_DIMS = (96, 192, 256, 384)


def paper_weights(prefix_dims: Sequence[int]) -> tuple[float, ...]:
    """Table 5's weight for each of ``prefix_dims``; a dimension it does not list is an error."""
    missing = [d for d in prefix_dims if d not in PAPER_DIM_WEIGHTS]
    if missing:
        raise ValueError(
            f"Table 5 has no weight for dims {missing}; choose from {sorted(PAPER_DIM_WEIGHTS)}"
        )
    return tuple(PAPER_DIM_WEIGHTS[d] for d in prefix_dims)


class WeightedMRLLoss(nn.Module):
    """Eq. 2 over a :class:`FractalHead` whose last classifier is the finest label level."""

    def __init__(
        self, head: FractalHead, prefix_dims: Sequence[int], weights: Sequence[float]
    ) -> None:
        super().__init__()
        if len(prefix_dims) != len(weights) or list(prefix_dims) != sorted(set(prefix_dims)):
            raise ValueError("prefix dims must be increasing, with one weight each")
        if prefix_dims[-1] != head.dim:
            raise ValueError(f"prefix dims must end at the head's dim {head.dim}")
        self.head = head
        self.prefix_dims = tuple(prefix_dims)
        self.weights = tuple(float(w) for w in weights)

    def forward(self, features: torch.Tensor, fine_labels: torch.Tensor) -> torch.Tensor:
        embedding = self.head(features)
        fine_level = len(self.head.classifiers) - 1
        total = embedding.new_zeros(())
        for dim, weight in zip(self.prefix_dims, self.weights, strict=True):
            logits = self.head.logits(embedding, fine_level, dim)
            total = total + weight * F.cross_entropy(logits, fine_labels)
        return total
