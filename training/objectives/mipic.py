"""MIPIC: Matryoshka self-distillation with intra-relational alignment and progressive information
chaining (``papers/mipic-matryoshka-self-distillation.txt``, §3, Eq. 4–18, appendix A.3/A.5).

Nested dims ``d_1 < … < d_n = D`` (the width of the states), layers ``k`` of the backbone.

SIA, per layer ``k`` and prefix ``d_i < D`` (§3.2). With ``h_CLS`` the layer's first token and
``h_j`` its other real tokens:

- attention matching (Eq. 4–6): teacher ``a_D = softmax(h_CLS·h_j / (√D τ_att))``, student
  ``a_i = softmax(h_CLS·P_i h_j[:d_i] / (√D τ_att))`` with a learnable up-projection
  ``P_i ∈ R^{D×d_i}``; ``L_att = KL(a_i ‖ a_D)``;
- hard top-k + linear CKA (Eq. 7–12): ``S_i`` = the ``k_i = max(8, ⌈γ_i m⌉)`` tokens of highest
  ``a_D`` (``γ = 0.2, 0.3, …`` for ``d_1, d_2, …``, appendix A.5; nested because ``k_i`` grows);
  ``L_CKA = 1 − CKA(h[S_i, :d_i], H[S_i, :])`` with
  ``CKA(X, Y) = ‖X̃ᵀỸ‖²_F / (‖X̃ᵀX̃‖_F ‖ỸᵀỸ‖_F)``, ``X̃`` centred over the selected tokens;
- ``L_SIA = Σ_k Σ_i (L_att + L_CKA)`` (Eq. 13–14).

PIC (§3.3, Eq. 15–17): checkpoints ``(l_i, d_i)``, ``z_i`` the pooled prefix ``d_i`` of layer
``l_i``; ``L_chain(i) = InfoNCE(φ_i(z_i), z_{i+1})`` over the batch (cosine / τ), ``φ_i`` a small
non-linear projector ``R^{d_i} → R^{d_{i+1}}``; ``L_PIC = Σ_i L_chain(i)``.

Total (Eq. 18): ``L = α·L_MRL + (1 − α)(L_SIA + L_PIC)``, ``α = 0.4``, ``τ = 0.05`` (Table 6),
``L_MRL`` the Matryoshka contrastive loss (:mod:`training.objectives.matryoshka_contrastive`).

Choices where the paper is vague:

- the teacher side (``a_D``, ``h_CLS``, the full states in CKA) is detached: "the full-dimensional
  representation acts as a teacher" and ``h_CLS`` is "a fixed semantic reference";
- ``h_j`` ranges over the real tokens after [CLS] (padding and [CLS] itself excluded); ``m`` in
  ``k_i`` is the number of those tokens and ``k_i`` is capped at it;
- ``L_SIA`` is the **sum** of its terms over prefixes and layers, as Eq. 13–14 write it (30
  terms for six layers and five prefixes below the full width), not their mean; the paper gives
  no separate weights for the attention and CKA terms, so each weighs one. The
  ``attention_weight`` and ``cka_weight`` settings (:data:`OPTIONS`) weigh them otherwise; both at
  ``1/T`` for ``T`` terms is the mean over SIA's terms (``T = 30`` for MiniLM-L6 trained whole at
  16…384), the reading that SIA's sum drowns the task loss. Screened like the temperature below,
  the mean lifts the prefixes from 32 d up by 7–13 points but costs 1.4 at 16 d. The two kinds
  of term also differ in size (at step 0 on Banking77 texts the 30 KL terms sum to 0.63, the 30
  ``1 − CKA`` terms to 2.22), so the CKA terms alone at ``1/30`` is the split that tells most;
  the best 16 d screened at seed 42, it was trained at three seeds: 1.1 points above the sum at
  16 d (p 0.51) and 5.5–7.2 above it from 32 d up, but 3.1 below MRL at 16 d (p 0.31). No
  weighting of SIA lifts 16 d, so the sum (the text) stays the default;
- ``τ_att = 1`` in Eq. 4–5 by default, a departure from the text: Table 6 lists a single
  ``τ = 0.05``, and the same symbol divides the attention logits (Eq. 4–5) and InfoNCE's
  (Eq. 17), so the text reads ``τ_att = 0.05``. With it the token distributions of MiniLM are
  nearly one-hot. The ``attention_temperature`` setting (:data:`OPTIONS`) trains the text's
  reading; screened by ``benchmarks.low_dim`` (``mipic@attention_temperature=0.05``, SimCSE
  setting, seed 42) it scores 14.7 points below ``τ_att = 1`` at 16 d on Banking77, so 1 stays;
- one ``P_i`` per (layer, dim), initialised to ``[I; 0]`` (the prefix itself);
  ``φ_i = Linear(d_i, d_{i+1}) → GELU → Linear(d_{i+1}, d_{i+1})``;
- ``z_i`` is pooled the way the backbone pools (mean for MiniLM) rather than the paper's [CLS],
  because that is the vector the bundle serves;
- checkpoints pair the nested dims with evenly spaced layers ending at the last one
  (``l_i = round(i·L/n)``): for MiniLM-L6 and 16…384, ``(1,16), (2,32), …, (6,384)``, the paper's
  TinyBERT-6L pattern; SIA uses the trainable layers (the paper: all six).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from training.objectives.matryoshka_contrastive import MatryoshkaContrastiveLoss
from training.objectives.simcse import info_nce
from training.objectives.tensors import TokenStates

PAPER_ALPHA = 0.4
PAPER_TEMPERATURE = 0.05
ATTENTION_TEMPERATURE = 1.0
TOP_K_MIN = 8
TOP_K_FIRST_RATIO = 0.2
TOP_K_RATIO_STEP = 0.1


def top_k_ratios(num_prefixes: int) -> list[float]:
    """``γ_i`` of appendix A.5 for the prefixes below the full width: 0.2, 0.3, …"""
    return [TOP_K_FIRST_RATIO + TOP_K_RATIO_STEP * i for i in range(num_prefixes)]


def checkpoint_layers(num_layers: int, num_dims: int) -> list[int]:
    """``l_i = round(i·L/n)``, ``i = 1..n``: evenly spaced layers ending at the last."""
    return [max(1, round(i * num_layers / num_dims)) for i in range(1, num_dims + 1)]


def linear_cka(
    student: torch.Tensor, teacher: torch.Tensor, selected: torch.Tensor
) -> torch.Tensor:
    """Linear CKA per sequence between ``student [B, m, d]`` and ``teacher [B, m, D]`` restricted
    to the ``selected [B, m]`` tokens (Eq. 11), via token Gram matrices:
    ``‖XᵀY‖²_F = Σ (XXᵀ ⊙ YYᵀ)``."""
    weight = selected[..., None].to(student.dtype)
    count = weight.sum(1, keepdim=True).clamp(min=1.0)

    def centred(x: torch.Tensor) -> torch.Tensor:
        return weight * (x - (x * weight).sum(1, keepdim=True) / count)

    student_gram = centred(student) @ centred(student).transpose(1, 2)
    teacher_gram = centred(teacher) @ centred(teacher).transpose(1, 2)
    cross = (student_gram * teacher_gram).sum((1, 2))
    norms = (student_gram.square().sum((1, 2)) * teacher_gram.square().sum((1, 2))).sqrt()
    return cross / norms.clamp(min=1e-12)


COMPONENTS = ("sia", "pic")
"""The distillation terms, each of which an ablation may leave out."""
OPTIONS = ("attention_temperature", "attention_weight", "cka_weight")
"""The settings a run may give other than the defaults here (a reading screened against them)."""


class MIPICLoss(nn.Module):
    """``α·L_MRL + (1 − α)(L_SIA + L_PIC)``; holds the learnable ``P_i`` and ``φ_i``.
    ``attention_weight`` and ``cka_weight`` weigh ``L_att`` and ``L_CKA`` in each SIA term.
    ``without`` leaves terms out (both out: ``α·L_MRL``, the matched MRL scaled by ``α``)."""

    def __init__(
        self,
        prefix_dims: Sequence[int],
        sia_layers: Sequence[int],
        num_layers: int,
        *,
        hidden_size: int,
        pooling: str = "mean",
        alpha: float = PAPER_ALPHA,
        temperature: float = PAPER_TEMPERATURE,
        attention_temperature: float = ATTENTION_TEMPERATURE,
        attention_weight: float = 1.0,
        cka_weight: float = 1.0,
        task_loss: str = "supervised",
        without: Sequence[str] = (),
    ) -> None:
        super().__init__()
        unknown = set(without) - set(COMPONENTS)
        if unknown:
            raise ValueError(f"MIPIC's components are {COMPONENTS}, not {sorted(unknown)}")
        self.components = [name for name in COMPONENTS if name not in without]
        self.task = MatryoshkaContrastiveLoss(prefix_dims, temperature, task_loss)
        self.prefix_dims = list(prefix_dims)
        self.sia_layers = list(sia_layers)
        self.pooling = pooling
        self.alpha = alpha
        self.temperature = temperature
        self.attention_temperature = attention_temperature
        self.attention_weight = attention_weight
        self.cka_weight = cka_weight
        self.checkpoints = list(
            zip(checkpoint_layers(num_layers, len(prefix_dims)), self.prefix_dims, strict=True)
        )
        self.up_projections = nn.ModuleDict()
        for layer in self.sia_layers:
            width = prefix_dims[-1] if layer == num_layers else hidden_size
            for dim in (d for d in prefix_dims if d < width):
                projection = nn.Linear(dim, width, bias=False)
                with torch.no_grad():
                    projection.weight.copy_(torch.eye(width, dim))
                self.up_projections[f"{layer}_{dim}"] = projection
        self.projectors = nn.ModuleList(
            nn.Sequential(nn.Linear(low, high), nn.GELU(), nn.Linear(high, high))
            for (_, low), (_, high) in zip(self.checkpoints[:-1], self.checkpoints[1:], strict=True)
        )

    def _log_attention(
        self, anchor: torch.Tensor, tokens: torch.Tensor, real: torch.Tensor
    ) -> torch.Tensor:
        scale = math.sqrt(anchor.shape[-1]) * self.attention_temperature
        scores = torch.einsum("bd,bmd->bm", anchor, tokens) / scale
        return torch.log_softmax(scores.masked_fill(~real, float("-inf")), dim=-1)

    def sia_layer(
        self, hidden: torch.Tensor, attention_mask: torch.Tensor, layer: int
    ) -> torch.Tensor:
        """``L_SIA^(k)`` of one layer's token states ``[B, m, D]`` (Eq. 13)."""
        width = hidden.shape[-1]
        real = attention_mask.bool().clone()
        real[:, 0] = False
        teacher = hidden.detach()
        anchor = teacher[:, 0]
        teacher_log = self._log_attention(anchor, teacher, real)
        order = teacher_log.argsort(dim=1, descending=True).argsort(dim=1)
        num_real = real.sum(1, keepdim=True)
        dims = [d for d in self.prefix_dims if d < width]
        total = hidden.new_zeros(())
        for dim, ratio in zip(dims, top_k_ratios(len(dims)), strict=True):
            student_log = self._log_attention(
                anchor, self.up_projections[f"{layer}_{dim}"](hidden[..., :dim]), real
            )
            student = student_log.exp()
            log_ratio = torch.where(real, student_log - teacher_log, 0.0)
            kl = (student * log_ratio).sum(1)
            k = torch.clamp(torch.ceil(ratio * num_real), min=TOP_K_MIN)
            selected = (order < torch.minimum(k, num_real)) & real
            cka = linear_cka(hidden[..., :dim], teacher, selected)
            total = total + (self.attention_weight * kl + self.cka_weight * (1 - cka)).mean()
        return total

    def sia(self, states: TokenStates) -> torch.Tensor:
        return sum(
            (self.sia_layer(states.layers[k], states.attention_mask, k) for k in self.sia_layers),
            states.embedding.new_zeros(()),
        )

    def pic(self, states: TokenStates) -> torch.Tensor:
        """``L_PIC``: InfoNCE from each projected checkpoint to the next (Eq. 16–17)."""
        pooled = [states.pooled(layer, dim, self.pooling) for layer, dim in self.checkpoints]
        links = zip(self.projectors, pooled[:-1], pooled[1:], strict=True)
        return sum(
            (info_nce(projector(low), high, self.temperature) for projector, low, high in links),
            states.embedding.new_zeros(()),
        )

    def forward(self, states: TokenStates, labels: torch.Tensor | None) -> torch.Tensor:
        task = self.task(states.embedding, labels)
        regularised = self.task.regularised(states)
        terms = {"sia": self.sia, "pic": self.pic}
        distillation = sum(
            (terms[name](regularised) for name in self.components), task.new_zeros(())
        )
        return self.alpha * task + (1 - self.alpha) * distillation
