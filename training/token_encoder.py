"""The trainable encoder: a Hugging Face backbone (all, some or none of its layers trainable) and a
token-wise linear projection, with every layer's token states exposed to the objectives.

``embedding = projection(pool(h_L)) = pool(projection(h_L))`` — the projection is linear and
pooling is a weighted mean, so projecting tokens then pooling equals pooling then projecting, and
the export can fuse the fine-tuned backbone, the pooling and the projection into ``encoder.onnx``
exactly as for a head on a frozen encoder (:mod:`training.export`).

The projection starts as ``[I_dim 0]``: the first ``dim`` coordinates of the backbone output, so
that step 0 is the raw encoder. With ``unfreeze_layers = 0`` only the projection trains ("head-only
over token states"); with ``0 < N < L`` the top ``N`` transformer layers train too; with ``N = L``
the whole backbone, its embeddings included.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from training.errors import FractalError
from training.frozen_encoder import FrozenEncoder
from training.objectives.tensors import TokenStates, pool


@dataclass
class CachedTokenStates:
    """A frozen backbone's output for a set of texts, computed once: the last layer's token states
    ``[n, tokens, hidden]`` (padded to the longest text), their mask, and every layer's pooled
    state ``[n, L + 1, hidden]``. Head-only training over token states reads batches from it."""

    last: torch.Tensor
    attention_mask: torch.Tensor
    pooled: torch.Tensor

    @classmethod
    @torch.inference_mode()
    def compute(
        cls, encoder: FrozenEncoder, texts: list[str] | tuple[str, ...], batch_size: int = 64
    ) -> CachedTokenStates:
        tokens = encoder.tokenizer(
            list(texts), padding=True, truncation=True, max_length=encoder.config.max_tokens,
            return_tensors="pt",
        ).to(encoder.device)
        last, pooled = [], []
        for start in range(0, len(texts), batch_size):
            ids = tokens["input_ids"][start : start + batch_size]
            mask = tokens["attention_mask"][start : start + batch_size]
            hidden = encoder.model(
                input_ids=ids, attention_mask=mask, output_hidden_states=True
            ).hidden_states
            last.append(hidden[-1].float().cpu())
            pooled.append(torch.stack([pool(h, mask, encoder.config.pooling) for h in hidden], 1))
        return cls(torch.cat(last), tokens["attention_mask"].cpu(), torch.cat(pooled).float().cpu())


def transformer_layers(backbone: nn.Module) -> nn.ModuleList:
    """The stack of transformer blocks of a BERT-like Hugging Face model."""
    encoder = getattr(backbone, "encoder", None)
    layers = getattr(encoder, "layer", None)
    if not isinstance(layers, nn.ModuleList):
        raise FractalError("only BERT-like backbones (model.encoder.layer) can be unfrozen")
    return layers


class TokenEncoder(nn.Module):
    """Backbone (with the top ``unfreeze_layers`` layers trainable) + token-wise projection."""

    def __init__(self, encoder: FrozenEncoder, dim: int, unfreeze_layers: int) -> None:
        super().__init__()
        self.backbone = encoder.model
        self.pooling = encoder.config.pooling
        hidden = encoder.config.hidden_size
        self.num_layers = len(transformer_layers(self.backbone))
        if not 0 <= unfreeze_layers <= self.num_layers:
            raise FractalError(
                f"--unfreeze-layers must be in 0..{self.num_layers} for this backbone, "
                f"got {unfreeze_layers}"
            )
        if not 1 <= dim <= hidden:
            raise FractalError(f"dim must be in 1..{hidden} (the hidden size), got {dim}")
        self.unfreeze_layers = unfreeze_layers
        self.projection = nn.Linear(hidden, dim)
        with torch.no_grad():
            self.projection.weight.copy_(torch.eye(dim, hidden))
            self.projection.bias.zero_()
        self.backbone.requires_grad_(unfreeze_layers == self.num_layers)
        for layer in transformer_layers(self.backbone)[self.num_layers - unfreeze_layers :]:
            layer.requires_grad_(True)

    @property
    def first_trainable_layer(self) -> int:
        """The lowest layer index (1-based) whose states change in training; ``L`` when only the
        projection trains (it acts on layer ``L``)."""
        return self.num_layers - max(self.unfreeze_layers, 1) + 1

    def backbone_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.backbone.parameters() if p.requires_grad]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> TokenStates:
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.unfreeze_layers > 0):
            output = self.backbone(
                input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True
            )
        hidden = output.hidden_states
        last = self.projection(hidden[-1])
        return TokenStates(
            embedding=pool(last, attention_mask, self.pooling),
            layers=(*hidden[:-1], last),
            attention_mask=attention_mask,
        )

    def from_cache(self, cache: CachedTokenStates, rows: np.ndarray) -> TokenStates:
        """The states of ``rows`` of a frozen backbone's cache (kept in host memory, the batch
        moved to the projection's device): only the projection runs."""
        device = self.projection.weight.device
        mask = cache.attention_mask[rows]
        width = int(mask.sum(1).max())
        mask = mask[:, :width].to(device)
        last = self.projection(cache.last[rows, :width].to(device))
        layers = (*([None] * self.num_layers), last)
        pooled = cache.pooled[rows].to(device)
        return TokenStates(pool(last, mask, self.pooling), layers, mask, pooled)

    def train(self, mode: bool = True) -> TokenEncoder:
        """Dropout only in the trainable backbone: a frozen backbone stays deterministic."""
        super().train(mode)
        self.backbone.train(mode and self.unfreeze_layers > 0)
        return self
