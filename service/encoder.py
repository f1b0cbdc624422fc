"""The bundle's encoder on ONNX Runtime: ``tokenizer.json`` + ``encoder.onnx`` → embeddings.

The tokenizer file already truncates at the backbone's max tokens and pads to the longest text of
a batch. The graph returns the full, unnormalised embedding; slicing and normalising prefixes is
the caller's business (:mod:`service.embedding`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from bundle import ATTENTION_MASK, EMBEDDING, ENCODER_FILE, INPUT_IDS, TOKENIZER_FILE, Manifest

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"


def execution_providers() -> list[str]:
    """CUDA first when this ONNX Runtime build has it, CPU always."""
    return [CUDA, CPU] if CUDA in ort.get_available_providers() else [CPU]


def onnx_session(path: Path, threads: int, spin: bool = False) -> ort.InferenceSession:
    """An inference session on ``threads`` intra-op threads (one inter-op thread: the graphs
    are sequential, and the service runs one encoder call at a time).

    With ``spin`` off, idle intra-op threads sleep instead of spin-waiting for the next call:
    spinning threads hold the cores that the index search and the HTTP work between encoder
    calls need (``benchmarks/service_settings``: up to 16% of QPS on 2 cores).
    """
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), options, providers=execution_providers())


@dataclass(frozen=True)
class Encoded:
    """Full, unnormalised embeddings ``(n, dim)`` and the tokens each text was read as."""

    vectors: np.ndarray
    tokens: np.ndarray


class OnnxEncoder:
    """Texts → full embeddings, one batch per call. Thread-safe, but meant for one thread."""

    def __init__(
        self, bundle_dir: Path, manifest: Manifest, threads: int, spin: bool = False
    ) -> None:
        self.dim = manifest.dim
        self.tokenizer = Tokenizer.from_file(str(bundle_dir / TOKENIZER_FILE))
        self.session = onnx_session(bundle_dir / ENCODER_FILE, threads, spin)
        self.threads = threads
        self.spin = spin

    @property
    def providers(self) -> list[str]:
        return list(self.session.get_providers())

    def encode(self, texts: Sequence[str]) -> Encoded:
        encodings = self.tokenizer.encode_batch(list(texts))
        input_ids = np.array([e.ids for e in encodings], dtype=np.int64)
        attention_mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        (vectors,) = self.session.run(
            [EMBEDDING], {INPUT_IDS: input_ids, ATTENTION_MASK: attention_mask}
        )
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.shape != (len(texts), self.dim):
            raise RuntimeError(
                f"{ENCODER_FILE} returned shape {vectors.shape}, "
                f"expected ({len(texts)}, {self.dim})"
            )
        return Encoded(vectors, attention_mask.sum(axis=1))
