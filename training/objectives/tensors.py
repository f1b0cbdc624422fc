"""Tensor types and operations the objectives share with the models that feed them.

They sit here, inside ``objectives/``, so that no objective imports upward into ``training/``:
the head, the frozen encoder and the trainable token encoder import them from here instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


def normalized_prefix(embedding: torch.Tensor, prefix_dim: int) -> torch.Tensor:
    """The first ``prefix_dim`` coordinates, L2-normalised, zero-padded back to full width.

    Zero padding lets one classifier per level read any prefix length.
    """
    prefix = F.normalize(embedding[:, :prefix_dim], dim=-1)
    return F.pad(prefix, (0, embedding.shape[-1] - prefix_dim))


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """One vector per sequence: the masked mean of token states, or the first token's state."""
    if pooling == "cls":
        return hidden[:, 0]
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


@dataclass
class TokenStates:
    """What one forward pass gives the objectives.

    ``layers[k]`` holds layer ``k``'s token states ``[batch, tokens, width]`` for ``k = 1..L``
    (``layers[0]`` is the embedding layer); the last one is projected (width ``dim``), the others
    are the backbone's (width ``hidden``). ``None`` when training on cached pooled features.
    With a frozen backbone (cached states, :class:`CachedTokenStates`) the frozen layers' entries
    are ``None`` and ``frozen_pooled[k]`` holds their pooled states ``[batch, hidden]`` instead.
    ``embedding`` is the pooled, projected, unnormalised output ``[batch, dim]``.
    """

    embedding: torch.Tensor
    layers: tuple[torch.Tensor | None, ...] | None = None
    attention_mask: torch.Tensor | None = None
    frozen_pooled: torch.Tensor | None = None

    def pooled(self, layer: int, dim: int, pooling: str) -> torch.Tensor:
        """The pooled first ``dim`` coordinates of layer ``layer``'s states ``[batch, dim]``."""
        if self.layers[layer] is None:
            return self.frozen_pooled[:, layer, :dim]
        return pool(self.layers[layer][..., :dim], self.attention_mask, pooling)

    def first_rows(self, count: int) -> TokenStates:
        """The same states for the batch's first ``count`` sequences only."""
        return TokenStates(
            embedding=self.embedding[:count],
            layers=None if self.layers is None else tuple(
                None if states is None else states[:count] for states in self.layers
            ),
            attention_mask=None if self.attention_mask is None else self.attention_mask[:count],
            frozen_pooled=None if self.frozen_pooled is None else self.frozen_pooled[:count],
        )
