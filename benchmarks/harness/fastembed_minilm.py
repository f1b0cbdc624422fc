"""fastembed (Qdrant's ONNX embedder) running the raw all-MiniLM-L6-v2 from a local folder.

fastembed 0.9.1 knows ``sentence-transformers/all-MiniLM-L6-v2`` as a
``PooledNormalizedEmbedding``: one ONNX graph, ``model.onnx`` (``input_ids``, ``attention_mask``,
``token_type_ids`` → the last hidden state), then mean pooling over the attention mask and L2
normalisation in NumPy. It normally downloads that folder from the hub repository
``Qdrant/all-MiniLM-L6-v2-onnx``; given ``specific_model_path`` it reads the same layout from a
local folder and never asks the hub. :func:`export_fastembed_folder` writes that folder from the
local weights (the TorchScript exporter, as for bundles), so fastembed runs exactly the model the
other engines run, with its own tokenisation, session options, batching and pooling.

Truncation: fastembed truncates at the tokenizer config's ``model_max_length`` (512 for MiniLM),
sentence-transformers at ``max_seq_length`` (256); the folder's config states the latter, so
every engine reads the same tokens.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from fastembed import TextEmbedding
from torch import nn
from transformers import AutoModel

from training.export import export_onnx

FASTEMBED_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
"""fastembed's own registration of the model (its pooling and normalisation come with it)."""
MODEL_FILE = "model.onnx"
INPUTS = ["input_ids", "attention_mask", "token_type_ids"]
COPIED_FILES = ("tokenizer.json", "special_tokens_map.json", "config.json")
TOKENIZER_CONFIG = "tokenizer_config.json"
ST_CONFIG = "sentence_bert_config.json"


class _LastHiddenState(nn.Module):
    """The transformer alone: token ids, mask and token types → the last layer's token states."""

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        self.backbone = backbone

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        output = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        )
        return output.last_hidden_state


def export_fastembed_folder(model_dir: Path, folder: Path) -> Path:
    """Write the sentence-transformers model folder ``model_dir`` as fastembed reads
    all-MiniLM-L6-v2 (see the module docstring) to ``folder``; return ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    backbone = AutoModel.from_pretrained(str(model_dir), local_files_only=True)
    ids = torch.tensor([[101, 7592, 102, 0], [101, 7592, 2088, 102]])
    mask = (ids != 0).long()
    axes = {0: "batch", 1: "sequence"}
    export_onnx(
        _LastHiddenState(backbone),
        (ids, mask, torch.zeros_like(ids)),
        folder / MODEL_FILE,
        INPUTS,
        ["last_hidden_state"],
        dict.fromkeys([*INPUTS, "last_hidden_state"], axes),
    )
    for name in COPIED_FILES:
        shutil.copy(model_dir / name, folder / name)
    config = json.loads((model_dir / TOKENIZER_CONFIG).read_text(encoding="utf-8"))
    max_tokens = json.loads((model_dir / ST_CONFIG).read_text(encoding="utf-8"))["max_seq_length"]
    config["model_max_length"] = max_tokens
    (folder / TOKENIZER_CONFIG).write_text(json.dumps(config), encoding="utf-8")
    return folder


def fastembed_model(folder: Path, threads: int) -> TextEmbedding:
    """fastembed's all-MiniLM-L6-v2 read from ``folder`` (no hub), its ONNX Runtime session on
    ``threads`` threads (fastembed's ``threads``: intra-op and inter-op)."""
    return TextEmbedding(
        FASTEMBED_MODEL, cache_dir=str(folder), threads=threads, specific_model_path=str(folder)
    )


def fastembed_encode(model: TextEmbedding, texts: Sequence[str], batch_size: int) -> np.ndarray:
    """``texts`` through fastembed's own batching (``embed(texts, batch_size)``), stacked:
    L2-normalised 384-d rows."""
    return np.stack(list(model.embed(list(texts), batch_size=batch_size)))
