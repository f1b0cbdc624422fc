"""Prefix supervision: the machinery every hierarchy objective of the Fractal paper shares.

An objective is a *schedule*: for each prefix ``j`` (64, 128, 192, 256 dims), a weight per label
level. One training step (paper, Algorithm 1, generalised to any schedule and any depth):

1. ``e = W·h + b`` and block dropout: block ``b`` of ``e`` is kept with probability ``keep[b]``;
2. sample a prefix ``j ~ Categorical(prefix_probs)``;
3. ``L = L(J) + prefix_weight · L(j) + discard_weight · Σ_{j ∈ D} R(j)`` where
   ``L(j) = Σ_level w[j, level] · (CE(head_level(ê_{1:j}), y_level)
   + supcon_weight · SupCon(ê_{1:j}, y_level))`` and ``ê_{1:j}`` is the L2-normalised prefix.

Two additions to the paper's recipe; with both weights at zero it is the paper's loss exactly.

- ``supcon_weight``: a supervised-contrastive term (Khosla et al., 2020) on the same prefix and
  labels as the cross-entropy, as in the paper's released code.
- ``discard_weight`` (ours): ``D`` holds the prefixes whose schedule row puts all its weight on one
  level ``ℓ`` that is not the finest (for V5: the 64-d prefix, ``ℓ`` = coarse). Such a prefix should
  say which ``ℓ``-class a text is in and nothing finer, but a frozen encoder's features mix both,
  and cross-entropy alone leaves the finer information in place: the 64-d prefix of a plain V5
  head still tells intents apart almost as well as the full vector. ``R(j)`` measures that
  leftover directly on the projection rows ``W_{1:j}``:

  ``R(j) = tr(W_{1:j} B_fine|ℓ W_{1:j}ᵀ) / tr(W_{1:j} B_ℓ W_{1:j}ᵀ)``,

  the spread of the finest-label means around their ``ℓ``-parent's mean (``B_fine|ℓ``) relative
  to the spread of the ``ℓ``-class means around the global mean (``B_ℓ``), both scatter matrices
  of the frozen training features (:class:`FineSpread`). Because the projection is linear the
  ratio is exact over the whole training set, not a noisy batch estimate. Driving it down makes
  the prefix keep the directions that separate coarse classes and drop those that separate fine
  labels inside a coarse class. Schedules without such a row (MRL, UHMT, no-prefix) are
  unaffected; the inverted ablation gets the mirror image (its full vector is the coarse-only one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from training.objectives.tensors import normalized_prefix


class PrefixHead(Protocol):
    """What a loss needs of the head it trains (``training.head.FractalHead`` is one): the
    projection, one classifier per level, and class scores read from a prefix."""

    projection: nn.Linear
    classifiers: nn.ModuleList

    def logits(self, embedding: torch.Tensor, level: int, prefix_dim: int) -> torch.Tensor: ...


PAPER_PREFIX_PROBS = (0.4, 0.3, 0.2, 0.1)
PAPER_BLOCK_KEEP = (0.95, 0.9, 0.8, 0.7)
PAPER_PREFIX_WEIGHT = 0.6


def supervised_contrastive(
    unit_vectors: torch.Tensor, labels: torch.Tensor, temperature: float = 0.1
) -> torch.Tensor:
    """SupCon: for each anchor with at least one same-label partner in the batch, the mean over
    its positives of ``−log softmax`` of the cosine similarities (self excluded) / temperature.
    Zero when no anchor has a positive."""
    similarity = unit_vectors @ unit_vectors.T / temperature
    self_mask = torch.eye(len(labels), dtype=torch.bool, device=labels.device)
    similarity = similarity.masked_fill(self_mask, float("-inf"))
    log_prob = similarity - torch.logsumexp(similarity, dim=1, keepdim=True)
    positives = (labels[:, None] == labels[None, :]) & ~self_mask
    counts = positives.sum(dim=1)
    anchors = counts > 0
    if not anchors.any():
        return unit_vectors.new_zeros(())
    positive_log_prob = log_prob.masked_fill(~positives, 0.0).sum(dim=1)
    return -(positive_log_prob[anchors] / counts[anchors]).mean()


def _class_means(x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class mean rows and class sizes for dense ids ``0..C-1``."""
    counts = torch.bincount(ids).to(x.dtype)
    sums = torch.zeros(len(counts), x.shape[1], dtype=x.dtype).index_add_(0, ids, x)
    return sums / counts.clamp(min=1)[:, None], counts


def _weighted_scatter(
    deviations: torch.Tensor, weights: torch.Tensor, total: float
) -> torch.Tensor:
    return (deviations * weights[:, None]).T @ deviations / total


@dataclass(frozen=True)
class FineSpread:
    """Scatter matrices of frozen features for the discard term, one pair per label level ``ℓ``:
    ``fine_within[ℓ]`` (finest-label means around their ``ℓ``-parent means) and ``between[ℓ]``
    (``ℓ``-class means around the global mean), each ``[input_dim, input_dim]``."""

    fine_within: tuple[torch.Tensor, ...]
    between: tuple[torch.Tensor, ...]

    @classmethod
    def from_data(cls, features: torch.Tensor, labels: torch.Tensor) -> FineSpread:
        x = features.double()
        n = float(len(x))
        fine_means, fine_counts = _class_means(x, labels[:, -1])
        fine_within, between = [], []
        for level in range(labels.shape[1]):
            parent_means, parent_counts = _class_means(x, labels[:, level])
            parent_of_fine = torch.zeros(len(fine_means), dtype=torch.long)
            parent_of_fine[labels[:, -1]] = labels[:, level]
            fine_within.append(
                _weighted_scatter(fine_means - parent_means[parent_of_fine], fine_counts, n)
            )
            between.append(_weighted_scatter(parent_means - x.mean(0), parent_counts, n))
        as_float = [m.float() for m in (*fine_within, *between)]
        depth = labels.shape[1]
        return cls(tuple(as_float[:depth]), tuple(as_float[depth:]))

    def ratio(self, rows: torch.Tensor, level: int) -> torch.Tensor:
        """``R = tr(W B_fine|ℓ Wᵀ) / tr(W B_ℓ Wᵀ)`` for projection rows ``W``."""
        fine = (rows @ self.fine_within[level] * rows).sum()
        coarse = (rows @ self.between[level] * rows).sum()
        return fine / coarse.clamp(min=1e-12)


def interpolated_schedule(coarse_weights: Sequence[float], depth: int) -> np.ndarray:
    """Schedule rows from per-prefix "coarseness" weights, for a hierarchy of ``depth`` levels.

    Prefix ``j`` with coarse weight ``a`` sits at position ``t = (1 − a)(depth − 1)`` between the
    coarsest (0) and finest (depth − 1) levels and splits its weight between the two levels around
    ``t``. For two levels this is exactly the paper's ``α_j·L0 + (1 − α_j)·L1``.
    """
    rows = np.zeros((len(coarse_weights), depth))
    for row, coarse in enumerate(coarse_weights):
        position = (1.0 - coarse) * (depth - 1)
        lower = int(np.floor(position + 1e-9))
        upper = min(lower + 1, depth - 1)
        rows[row, lower] += 1.0 - (position - lower)
        rows[row, upper] += position - lower
    return rows


class PrefixSupervisionLoss(nn.Module):
    """The loss of one training step; subclasses define the schedule ``[prefix, level]``."""

    @staticmethod
    def make_schedule(num_prefixes: int, depth: int) -> np.ndarray:
        raise NotImplementedError

    def __init__(
        self,
        head: PrefixHead,
        prefix_dims: Sequence[int],
        *,
        prefix_probs: Sequence[float] = PAPER_PREFIX_PROBS,
        block_keep: Sequence[float] = PAPER_BLOCK_KEEP,
        prefix_weight: float = PAPER_PREFIX_WEIGHT,
        supcon_weight: float = 0.0,
        supcon_temperature: float = 0.1,
        discard_weight: float = 0.0,
        fine_spread: FineSpread | None = None,
    ) -> None:
        super().__init__()
        if not (len(prefix_probs) == len(block_keep) == len(prefix_dims)):
            raise ValueError("prefix_probs and block_keep need one entry per prefix")
        if discard_weight and fine_spread is None:
            raise ValueError("the discard term needs the features' FineSpread")
        self.head = head
        self.prefix_dims = list(prefix_dims)
        self.schedule = self.make_schedule(len(prefix_dims), len(head.classifiers))
        self.prefix_probs = np.asarray(prefix_probs, dtype=float) / np.sum(prefix_probs)
        self.register_buffer("block_keep", torch.tensor(block_keep, dtype=torch.float32))
        self.prefix_weight = prefix_weight
        self.supcon_weight = supcon_weight
        self.supcon_temperature = supcon_temperature
        self.discard_weight = discard_weight
        self.fine_spread = fine_spread
        finest = self.schedule.shape[1] - 1
        self.discarding = [
            (dim, int(np.argmax(row)))
            for dim, row in zip(self.prefix_dims, self.schedule, strict=True)
            if np.isclose(row.max(), 1.0) and int(np.argmax(row)) != finest
        ]

    def block_dropout(self, embedding: torch.Tensor) -> torch.Tensor:
        """Zero each prefix block of each row independently, keeping block ``b`` w.p. keep[b]."""
        keep = torch.bernoulli(self.block_keep.expand(len(embedding), -1))
        widths = torch.tensor(np.diff([0, *self.prefix_dims]), device=embedding.device)
        return embedding * torch.repeat_interleave(keep, widths, dim=1)

    def prefix_loss(self, embedding: torch.Tensor, labels: torch.Tensor, j: int) -> torch.Tensor:
        """``L(j)`` of the module docstring for prefix index ``j`` (0-based)."""
        dim = self.prefix_dims[j]
        total = embedding.new_zeros(())
        unit = normalized_prefix(embedding, dim)
        for level, weight in enumerate(self.schedule[j]):
            if weight == 0:
                continue
            term = F.cross_entropy(self.head.logits(embedding, level, dim), labels[:, level])
            if self.supcon_weight:
                term = term + self.supcon_weight * supervised_contrastive(
                    unit, labels[:, level], self.supcon_temperature
                )
            total = total + float(weight) * term
        return total

    def discard_loss(self) -> torch.Tensor:
        """``Σ_{j ∈ D} R(j)``: finer-label spread left in the coarse-only prefixes."""
        rows = self.head.projection.weight
        total = rows.new_zeros(())
        for dim, level in self.discarding:
            total = total + self.fine_spread.ratio(rows[:dim], level)
        return total

    def forward(
        self, features: torch.Tensor, labels: torch.Tensor, generator: np.random.Generator
    ) -> torch.Tensor:
        embedding = self.block_dropout(self.head(features))
        j = int(generator.choice(len(self.prefix_dims), p=self.prefix_probs))
        full = self.prefix_loss(embedding, labels, len(self.prefix_dims) - 1)
        loss = full + self.prefix_weight * self.prefix_loss(embedding, labels, j)
        if self.discard_weight and self.discarding:
            loss = loss + self.discard_weight * self.discard_loss()
        return loss
