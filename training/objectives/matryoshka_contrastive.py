"""The Matryoshka contrastive loss: the task term of MIC and MIPIC and, alone, their matched MRL.

MIC paper, appendix A.2.1, Eq. 2 (Kusupati et al., 2022, with InfoNCE as the task loss): the same
contrastive loss on every nested prefix ``e_{1:m}``, ``m ∈ M``, averaged over ``M``:

    L_MRL = (1/|M|) Σ_m InfoNCE(ê_{1:m})

The InfoNCE is one of two task losses (:data:`~training.objectives.simcse.TASK_LOSSES`):

- ``supervised`` (our default, for labelled intents): the positives of an anchor are the other
  texts of the batch with its label (:func:`~training.objectives.base.supervised_contrastive`);
- ``simcse``, the papers' own: unsupervised SimCSE on a stacked two-view batch
  (:func:`~training.objectives.simcse.simcse`); no labels.

Both use ``τ = 0.05`` (MIPIC, Table 6). MIC, MIPIC and this baseline share the task loss exactly,
so a difference between them is caused by their extra terms alone. Under ``simcse`` those extra
terms see the first view only (:meth:`MatryoshkaContrastiveLoss.regularised`): with both views in
the batch, every sentence would meet its own near-copy as a negative in MIPIC's chain InfoNCE and
in MIC's uniformity kernel.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from training.objectives.base import supervised_contrastive
from training.objectives.simcse import check_task_loss, simcse
from training.objectives.tensors import TokenStates

CONTRASTIVE_TEMPERATURE = 0.05


class MatryoshkaContrastiveLoss(nn.Module):
    """Mean over the nested prefixes of InfoNCE on the L2-normalised prefix: supervised (labels)
    or unsupervised SimCSE (a two-view batch, ``labels`` ``None``)."""

    def __init__(
        self,
        prefix_dims: Sequence[int],
        temperature: float = CONTRASTIVE_TEMPERATURE,
        task_loss: str = "supervised",
    ) -> None:
        super().__init__()
        self.prefix_dims = list(prefix_dims)
        self.temperature = temperature
        self.task_loss = check_task_loss(task_loss)

    def forward(self, embedding: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor:
        if self.task_loss == "simcse":
            losses = [simcse(embedding[:, :dim], self.temperature) for dim in self.prefix_dims]
        else:
            losses = [
                supervised_contrastive(
                    F.normalize(embedding[:, :dim], dim=-1), labels, self.temperature
                )
                for dim in self.prefix_dims
            ]
        return torch.stack(losses).mean()

    def regularised(self, states: TokenStates) -> TokenStates:
        """The rows an objective's regularisers see: the whole batch, or the first views of a
        two-view SimCSE batch."""
        if self.task_loss == "simcse":
            return states.first_rows(len(states.embedding) // 2)
        return states
