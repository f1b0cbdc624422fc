"""Training objectives, one module each; :data:`OBJECTIVES` maps a CLI name to its loss.

These are the hierarchy objectives of the Fractal paper (heads on frozen features, ``fractal
train``). The contrastive ones — ``matryoshka_contrastive`` (MRL), ``mic``, ``mipic``, ``sfs`` —
are trained by :mod:`training.finetune` (``fractal finetune``).
"""

from __future__ import annotations

from training.objectives.base import PrefixSupervisionLoss
from training.objectives.inverted import InvertedLoss
from training.objectives.mrl import MRLLoss
from training.objectives.no_prefix import NoPrefixLoss
from training.objectives.uhmt import UHMTLoss
from training.objectives.v5 import V5Loss

OBJECTIVES: dict[str, type[PrefixSupervisionLoss]] = {
    "v5": V5Loss,
    "mrl": MRLLoss,
    "inverted": InvertedLoss,
    "no-prefix": NoPrefixLoss,
    "uhmt": UHMTLoss,
}
