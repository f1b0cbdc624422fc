"""The trainable head on a frozen encoder: a linear projection to ``dim`` plus one classifier per
hierarchy level, applied to an L2-normalised prefix of the projected vector.

The projection is the only part that reaches the bundle's ``encoder.onnx``; the classifiers go to
``heads.onnx`` (coarse level on the coarse prefix, finest level on the full vector).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from training.objectives.tensors import normalized_prefix


class FractalHead(nn.Module):
    """``projection: R^input_dim → R^dim`` and ``classifiers[level]: R^dim → R^K_level``."""

    def __init__(
        self, input_dim: int, num_classes: list[int], *, dim: int = 256, logit_scale: float = 16.0
    ) -> None:
        super().__init__()
        self.input_dim = input_dim
        self.dim = dim
        self.projection = nn.Linear(input_dim, dim)
        self.classifiers = nn.ModuleList(nn.Linear(dim, k, bias=False) for k in num_classes)
        self.logit_scale = logit_scale

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """The full, unnormalised embedding."""
        return self.projection(features)

    def logits(self, embedding: torch.Tensor, level: int, prefix_dim: int) -> torch.Tensor:
        """Class scores of ``level`` read from the normalised ``prefix_dim`` prefix.

        Cosine classifier: unit prefix against unit class vectors, times a fixed scale, so that a
        prefix can only win by pointing at its class, not by growing its norm.
        """
        weights = F.normalize(self.classifiers[level].weight, dim=-1)
        return self.logit_scale * normalized_prefix(embedding, prefix_dim) @ weights.T
