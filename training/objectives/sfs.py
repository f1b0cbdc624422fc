"""SFS: Semantic Fragment Similarity inside a contrastive objective
(``papers/sfs-semantic-fragment-similarity.txt``, §2.2, Eq. 3 and the InfoNCE of "Training").

The embedding ``e ∈ R^dim`` is cut into ``N_f = dim / d_frag`` non-overlapping fragments and two
texts are scored by the mean of their fragment cosines (Eq. 3):

    S_frag(q, d) = (1/N_f) Σ_i cos(q_i, d_i)

The paper's training objective is InfoNCE with ``S_frag`` in place of the cosine. Our data are
labelled intents, not query–document pairs, so the contrastive form is the supervised one
(:func:`~training.objectives.base.supervised_contrastive`): every other text of the batch with the
same label is a positive, every text with another label a negative.

Choices where the paper is silent, all documented here:

- temperature: the paper's InfoNCE has none written; an unscaled score in [−1, 1] gives almost flat
  softmaxes, so ``S_frag / τ`` with ``τ = 0.05`` (the MIPIC paper's value) is used;
- ``S_frag`` is computed as an inner product of fragment-normalised vectors scaled by
  ``1/sqrt(N_f)`` (:func:`fragment_normalize`), the same map the index uses
  (``index/fragments.py``), so the trained and the served score are the same function;
- ``d_frag = dim`` is one fragment, i.e. plain cosine InfoNCE: the global-cosine baseline;
- under the ``simcse`` task loss (no labels) the positive of a text is its other dropout view
  (:mod:`training.objectives.simcse`, Eq. 8 with ``S_frag`` in place of the cosine).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from training.objectives.base import supervised_contrastive
from training.objectives.simcse import check_task_loss, simcse

SFS_TEMPERATURE = 0.05


def fragment_normalize(embedding: torch.Tensor, fragment_dim: int) -> torch.Tensor:
    """Rows mapped so that inner products are ``S_frag``: each fragment L2-normalised, the row
    divided by ``sqrt(N_f)``."""
    rows, dim = embedding.shape
    if fragment_dim <= 0 or dim % fragment_dim:
        raise ValueError(f"fragment_dim {fragment_dim} must be a positive divisor of {dim}")
    fragments = F.normalize(embedding.reshape(rows, dim // fragment_dim, fragment_dim), dim=-1)
    return fragments.reshape(rows, dim) / math.sqrt(dim // fragment_dim)


class SFSLoss(nn.Module):
    """InfoNCE over ``S_frag / τ`` of the full embedding: supervised (same label = positive) or
    SimCSE (a two-view batch, ``labels`` ``None``)."""

    def __init__(
        self, fragment_dim: int, temperature: float = SFS_TEMPERATURE, task_loss: str = "supervised"
    ) -> None:
        super().__init__()
        self.fragment_dim = fragment_dim
        self.temperature = temperature
        self.task_loss = check_task_loss(task_loss)

    def forward(self, embedding: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor:
        scored = fragment_normalize(embedding, self.fragment_dim)
        if self.task_loss == "simcse":
            # The fragment-normalised rows have unit norm: their cosine is S_frag.
            return simcse(scored, self.temperature)
        return supervised_contrastive(scored, labels, self.temperature)
