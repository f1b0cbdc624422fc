"""Training objectives, one module each, and their losses by name: :data:`OBJECTIVES` for the
heads on frozen features (``fractal train``), :data:`FINETUNE_LOSSES` for the contrastive
objectives that train the encoder too (``fractal finetune``, :mod:`training.finetune`).

The names, and which trainer each belongs to, are :mod:`bundle.objectives`'s: both registries
hold exactly the objectives the table gives their trainer, in the table's order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from torch import nn

from bundle.objectives import FINETUNE_OBJECTIVES, HEAD_OBJECTIVES
from training.objectives import mic, mipic
from training.objectives.base import PrefixSupervisionLoss
from training.objectives.inverted import InvertedLoss
from training.objectives.matryoshka_contrastive import MatryoshkaContrastiveLoss
from training.objectives.mic import MICLoss
from training.objectives.mipic import MIPICLoss
from training.objectives.mrl import MRLLoss
from training.objectives.no_prefix import NoPrefixLoss
from training.objectives.sfs import SFSLoss
from training.objectives.uhmt import UHMTLoss
from training.objectives.v5 import V5Loss

Loss = TypeVar("Loss")


def _as_in_table(names: tuple[str, ...], losses: Mapping[str, Loss]) -> dict[str, Loss]:
    """``losses`` in the order of ``names``; an objective without a loss, or a loss for no
    objective of the table, is an error."""
    if set(losses) != set(names):
        raise ImportError(
            f"the losses {sorted(losses)} are not the objectives {sorted(names)} of "
            "bundle.objectives"
        )
    return {name: losses[name] for name in names}


OBJECTIVES: dict[str, type[PrefixSupervisionLoss]] = _as_in_table(
    HEAD_OBJECTIVES,
    {
        "v5": V5Loss,
        "mrl": MRLLoss,
        "inverted": InvertedLoss,
        "no-prefix": NoPrefixLoss,
        "uhmt": UHMTLoss,
    },
)


@dataclass(frozen=True)
class FinetuneLoss:
    """A contrastive objective's loss and what training it needs."""

    loss: type[nn.Module]
    reads_token_states: bool = False
    """Its loss takes the encoder's token and layer states, not only the pooled embedding."""
    components: tuple[str, ...] = ()
    """The parts an ablation (``without``) may leave out."""
    options: tuple[str, ...] = ()
    """The loss's keyword settings (positive numbers) a run may set other than the paper's
    reading (``FinetuneConfig.options``): readings of a vague text, screened against it."""


FINETUNE_LOSSES: dict[str, FinetuneLoss] = _as_in_table(
    FINETUNE_OBJECTIVES,
    {
        "mrl": FinetuneLoss(MatryoshkaContrastiveLoss),
        "sfs": FinetuneLoss(SFSLoss),
        "mic": FinetuneLoss(MICLoss, reads_token_states=True, components=mic.COMPONENTS),
        "mipic": FinetuneLoss(
            MIPICLoss,
            reads_token_states=True,
            components=mipic.COMPONENTS,
            options=mipic.OPTIONS,
        ),
    },
)
