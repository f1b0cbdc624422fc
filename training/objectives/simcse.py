"""Unsupervised SimCSE (Gao et al., 2021): the task loss of the MIC and MIPIC papers' own setting
(MIC appendix B.3, Eq. 8; MIPIC appendix A.3).

A batch of ``N`` unlabelled sentences goes through the encoder twice in training mode. The two
passes differ only in their dropout masks ``z`` and ``z′``, which gives two views ``e^z`` and
``e^z′`` of every sentence. Each first view must pick its own second view among the batch's
second views:

    L_SimCSE = −(1/N) Σ_i log exp(cos(e_i^z, e_i^z′)/τ) / Σ_j exp(cos(e_i^z, e_j^z′)/τ)

with ``τ = 0.05`` (Gao et al.; MIPIC, Table 6). The trainer stacks the two views in one batch:
rows ``0..N−1`` are the first views and rows ``N..2N−1`` the second (:func:`split_views`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

TASK_LOSSES = ("supervised", "simcse")
"""``supervised``: same label = positive (our labelled intents); ``simcse``: the papers' own
unsupervised loss, the other dropout view of the same sentence = positive."""


def check_task_loss(name: str) -> str:
    """``name`` if it is one of :data:`TASK_LOSSES`; ``ValueError`` otherwise."""
    if name not in TASK_LOSSES:
        raise ValueError(f"task loss must be one of {', '.join(TASK_LOSSES)}, not {name!r}")
    return name


def info_nce(anchors: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """Row ``i`` of ``anchors`` should pick row ``i`` of ``targets`` among the batch (cosine / τ,
    cross-entropy over the rows of ``targets``)."""
    logits = F.normalize(anchors, dim=-1) @ F.normalize(targets, dim=-1).T / temperature
    return F.cross_entropy(logits, torch.arange(len(logits), device=logits.device))


def split_views(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The first and the second views of a stacked two-view batch."""
    if len(rows) % 2:
        raise ValueError(f"a two-view batch has an even number of rows, not {len(rows)}")
    half = len(rows) // 2
    return rows[:half], rows[half:]


def simcse(views: torch.Tensor, temperature: float) -> torch.Tensor:
    """Eq. 8 on a stacked two-view batch ``[2N, d]``."""
    first, second = split_views(views)
    return info_nce(first, second, temperature)
