"""A bundle folder's embeddings of texts through its own ``tokenizer.json`` and ``encoder.onnx``,
batched as the service batches them. No torch: ``fractal quantize`` checks its int8 graph with
this alone, and the export checks its graphs against torch with it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from bundle import ATTENTION_MASK, EMBEDDING, ENCODER_FILE, INPUT_IDS, TOKENIZER_FILE
from bundle.openvino_session import OpenVinoSession

CHECK_BATCH_SIZE = 16


def tokenize_batch(tokenizer: Tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """``input_ids`` and ``attention_mask`` (int64, padded to the longest text) for one batch."""
    encodings = tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    return ids, mask


def cpu_session(path: Path) -> ort.InferenceSession:
    """An ONNX Runtime session of the graph at ``path`` on the CPU provider."""
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def onnx_embeddings(folder: Path, texts: list[str], runtime: str = "onnxruntime") -> np.ndarray:
    """``folder``'s unnormalised embeddings of ``texts`` through its tokenizer.json and
    encoder.onnx alone, in batches of similar lengths, as the service forms them: padded, but
    not all to max_tokens. ``runtime`` (``onnxruntime`` or ``openvino``) runs the graph: a twin
    is checked on the runtime the service will run it on."""
    tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
    graph = folder / ENCODER_FILE
    session = OpenVinoSession(graph, threads=0) if runtime == "openvino" else cpu_session(graph)
    order = np.argsort([len(text) for text in texts], kind="stable")
    batches = []
    for start in range(0, len(order), CHECK_BATCH_SIZE):
        batch = order[start : start + CHECK_BATCH_SIZE]
        ids, mask = tokenize_batch(tokenizer, [texts[i] for i in batch])
        batches.append(session.run([EMBEDDING], {INPUT_IDS: ids, ATTENTION_MASK: mask})[0])
    return np.concatenate(batches)[np.argsort(order)]
