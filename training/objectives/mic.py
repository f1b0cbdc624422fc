"""MIC: Matryoshka contrastive loss + isotropic subspace alignment
(``papers/mic-isotropic-subspace-alignment.txt``, §2, Eq. 1–2 and appendix B.3).

For each selected layer ``l`` and nested dimension ``d`` the token states ``H ∈ R^{B×L×D}`` (mask
``M``) are split into a prefix ``H_pre = H[..., :d]`` and a residual ``H_res = H[..., d:]``.

Soft Collapse Regularisation (§2.1). Each sequence ``i`` is standardised over its own ``N_i`` real
tokens (Eq. 1): ``X̃_pre,i,l = M_il (H_pre,i,l − μ_pre,i) ⊘ (σ_pre,i + ε)``, likewise ``X̃_res``;
the token-wise cross-correlation is ``C = (1/B) Σ_i (1/N_i) Σ_l X̃_pre,i,l X̃_res,i,lᵀ``
(``d × (D−d)``), and

    L_corr = (1/(d·(D−d))) Σ_uv max(0, |C_uv| − τ_corr)²
    L_var  = max(0, 1 − σ̄_pre) + 0.5·max(0, 1 − σ̄_res)
    L_SCR  = L_corr + λ_var·L_var

with ``σ̄`` the mean token-wise standard deviation of the subspace (mean of ``σ_i`` over sequences
and dimensions).

Spectral Isotropy Regularisation (§2.2) on the mean-pooled prefix ``Z = pool(H_pre) ∈ R^{B×d}``:
``v_j`` the batch variance of dimension ``j``, ``L_cv = std(v) / (mean(v) + ε)``;
``K_ij = exp(−2t(1 − cos(Z_i, Z_j)))`` with ``t = 2``, ``L_unif = log(mean_{i≠j} K_ij + ε)``;
``L_SIR = (L_cv + L_unif) / 2``.

Total (§2.3): ``L = L_MRL + γ·(1/(|L_align||D|)) Σ_l Σ_d (L_SCR + L_SIR)``, ``γ = 0.6``,
``τ_corr = 0.1``, ``λ_var = 0.1`` (Table 4), ``L_MRL`` the Matryoshka contrastive loss
(:mod:`training.objectives.matryoshka_contrastive`).

Choices where the paper is vague:

- ``D`` in the alignment sum is the nested dims below the state width: at ``d = D`` there is no
  residual and ``L_SCR`` is undefined; SIR is averaged over the same dims so both terms share one
  set;
- ``ε = 1e-5`` (standardisation, CV) and ``1e-8`` (inside the log);
- the selected layers are those of the paper's 6-layer backbone (TinyBERT-6L: layers 2 and 4) when
  they are trainable; when only the top layers (or only the projection) train, the trainer uses
  every trainable layer instead (:func:`training.finetune.align_layers`): a regulariser on frozen
  states has no gradient.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from training.objectives.matryoshka_contrastive import MatryoshkaContrastiveLoss
from training.objectives.tensors import TokenStates, pool

PAPER_GAMMA = 0.6
PAPER_TAU_CORR = 0.1
PAPER_LAMBDA_VAR = 0.1
PAPER_UNIFORMITY_T = 2.0
STD_EPS = 1e-5
LOG_EPS = 1e-8


def _standardize(
    states: torch.Tensor, mask: torch.Tensor, counts: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 1: per-sequence masked standardisation; returns ``X̃`` and ``σ`` ``[B, width]``."""
    mean = (states * mask).sum(1) / counts
    variance = (((states - mean[:, None]) * mask) ** 2).sum(1) / counts
    std = variance.clamp(min=1e-12).sqrt()
    return mask * (states - mean[:, None]) / (std[:, None] + STD_EPS), std


def soft_collapse(
    states: torch.Tensor,
    attention_mask: torch.Tensor,
    dim: int,
    *,
    tau_corr: float = PAPER_TAU_CORR,
    lambda_var: float = PAPER_LAMBDA_VAR,
) -> torch.Tensor:
    """``L_SCR = L_corr + λ_var·L_var`` for the split of ``states`` at ``dim`` (§2.1)."""
    mask = attention_mask[..., None].to(states.dtype)
    counts = mask.sum(1).clamp(min=1.0)
    prefix, prefix_std = _standardize(states[..., :dim], mask, counts)
    residual, residual_std = _standardize(states[..., dim:], mask, counts)
    correlation = (torch.einsum("blu,blv->buv", prefix, residual) / counts[..., None]).mean(0)
    corr_loss = (F.relu(correlation.abs() - tau_corr) ** 2).mean()
    var_loss = F.relu(1 - prefix_std.mean()) + 0.5 * F.relu(1 - residual_std.mean())
    return corr_loss + lambda_var * var_loss


def spectral_isotropy(
    pooled_prefix: torch.Tensor, t: float = PAPER_UNIFORMITY_T
) -> torch.Tensor:
    """``L_SIR = (L_cv + L_unif) / 2`` of pooled prefixes ``[B, d]`` (§2.2)."""
    variances = pooled_prefix.var(dim=0, unbiased=False)
    cv_loss = variances.std(unbiased=False) / (variances.mean() + STD_EPS)
    unit = F.normalize(pooled_prefix, dim=-1)
    kernel = torch.exp(-2 * t * (1 - unit @ unit.T))
    batch = len(unit)
    off_diagonal = (kernel.sum() - kernel.diagonal().sum()) / (batch * (batch - 1))
    return 0.5 * (cv_loss + torch.log(off_diagonal + LOG_EPS))


COMPONENTS = ("scr", "sir")
"""The regularisers, each of which an ablation may leave out (Table 5 of the paper)."""


class MICLoss(nn.Module):
    """``L_MRL + γ·L_align`` over ``align_layers`` × the nested dims below the state width;
    ``without`` leaves components out of ``L_align`` (both out: the matched MRL)."""

    def __init__(
        self,
        prefix_dims: Sequence[int],
        align_layers: Sequence[int],
        *,
        pooling: str = "mean",
        gamma: float = PAPER_GAMMA,
        tau_corr: float = PAPER_TAU_CORR,
        lambda_var: float = PAPER_LAMBDA_VAR,
        task_loss: str = "supervised",
        without: Sequence[str] = (),
    ) -> None:
        super().__init__()
        unknown = set(without) - set(COMPONENTS)
        if unknown:
            raise ValueError(f"MIC's components are {COMPONENTS}, not {sorted(unknown)}")
        self.task = MatryoshkaContrastiveLoss(prefix_dims, task_loss=task_loss)
        self.prefix_dims = list(prefix_dims)
        self.align_layers = list(align_layers)
        self.pooling = pooling
        self.gamma = gamma
        self.tau_corr = tau_corr
        self.lambda_var = lambda_var
        self.components = [name for name in COMPONENTS if name not in without]

    def alignment(self, states: TokenStates) -> torch.Tensor:
        """``L_align``: the mean of ``L_SCR + L_SIR`` (those not left out) over layers and
        nested dims."""
        terms = []
        for layer in self.align_layers:
            hidden = states.layers[layer]
            for dim in (d for d in self.prefix_dims if d < hidden.shape[-1]):
                term = hidden.new_zeros(())
                if "scr" in self.components:
                    term = term + soft_collapse(
                        hidden, states.attention_mask, dim,
                        tau_corr=self.tau_corr, lambda_var=self.lambda_var,
                    )
                if "sir" in self.components:
                    pooled = pool(hidden[..., :dim], states.attention_mask, self.pooling)
                    term = term + spectral_isotropy(pooled)
                terms.append(term)
        return torch.stack(terms).mean()

    def forward(self, states: TokenStates, labels: torch.Tensor | None) -> torch.Tensor:
        task = self.task(states.embedding, labels)
        if not self.components:
            return task
        return task + self.gamma * self.alignment(self.task.regularised(states))
