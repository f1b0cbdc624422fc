"""Every objective a bundle can be made with, and which trainer makes it: the one table the
manifest check (:mod:`bundle.format`), the trainers' option checks and the loss registries
(:mod:`training.objectives`) read their names from.

Standard library only, like the rest of ``bundle``: the service reads a manifest's objective
without torch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Objective:
    """One objective: its name in a manifest and on the command line, and how it is trained.

    An objective that is neither a head nor a fine-tune objective is made by its own command
    (``mshc``: ``fractal mshc``) or by export alone (``identity``: the backbone's own prefixes).
    """

    name: str
    head: bool = False
    """Trained as a head on frozen features (``fractal train``, ``fractal run``)."""
    finetune: bool = False
    """Trained contrastively with the encoder's top layers (``fractal finetune``)."""
    ablation: bool = False
    """A head objective that ablates V5 in the Fractal paper (its S is compared with V5's)."""


OBJECTIVE_TABLE = (
    Objective("v5", head=True),
    Objective("mrl", head=True, finetune=True),
    Objective("inverted", head=True, ablation=True),
    Objective("no-prefix", head=True, ablation=True),
    Objective("uhmt", head=True, ablation=True),
    Objective("mic", finetune=True),
    Objective("mipic", finetune=True),
    Objective("sfs", finetune=True),
    Objective("mshc"),
    Objective("identity"),
)

OBJECTIVES = tuple(objective.name for objective in OBJECTIVE_TABLE)
"""Every objective a manifest may name."""
HEAD_OBJECTIVES = tuple(objective.name for objective in OBJECTIVE_TABLE if objective.head)
FINETUNE_OBJECTIVES = tuple(objective.name for objective in OBJECTIVE_TABLE if objective.finetune)
ABLATION_OBJECTIVES = tuple(objective.name for objective in OBJECTIVE_TABLE if objective.ablation)
