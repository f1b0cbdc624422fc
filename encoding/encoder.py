"""The bundle's encoder: ``tokenizer.json`` + ``encoder.onnx`` → embeddings, on ONNX Runtime, or
on OpenVINO for a graph quantised for it (:func:`chosen_runtime`).

An input is a text, which the tokenizer file turns into token ids (truncated at the backbone's max
tokens, special tokens added), or token ids already made that way (the OpenAI API's token-array
input, or texts the encoder queue tokenised when it queued them), which are the sequence as given.
One call is run in sub-batches of similar length, each at most a budget of padded tokens
(:func:`encoding.length_batches.token_batches`), each padded on the right to its own longest
sequence, with an attention mask over the real tokens; the rows come back in the caller's order.
On OpenVINO each call is padded further, to one of a few shapes
(:mod:`encoding.shape_buckets`), because that runtime pays for every new input shape.
The graph returns the full, unnormalised embedding; slicing and normalising prefixes is the
caller's business (:mod:`service.embedding`; ``fractal embed`` stores the full vectors).

The service's encoder queue and ``fractal embed``'s workers both run this class, which is why it
lives in :mod:`encoding` and not in ``service/`` (no FastAPI, Starlette or Redis on the way).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from bundle import ATTENTION_MASK, EMBEDDING, ENCODER_FILE, INPUT_IDS, TOKENIZER_FILE, Manifest
from bundle.openvino_session import OpenVinoSession, openvino_installed
from encoding import TokenIds
from encoding.length_batches import DEFAULT_BATCH_TOKENS, token_batches
from encoding.priority import made_at_lower_priority, per_thread
from encoding.shape_buckets import bucketed_shape

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
EncoderInput = str | TokenIds
"""A text, or the token ids the bundle's tokenizer makes of one."""
EncoderRuntime = Literal["auto", "onnxruntime", "openvino"]
"""Which runtime runs ``encoder.onnx``; see :func:`chosen_runtime`."""


class EncoderRuntimeError(RuntimeError):
    """The runtime asked for cannot run here (``openvino`` without the package)."""


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


def chosen_runtime(asked: EncoderRuntime, manifest: Manifest) -> str:
    """The runtime that runs the bundle's encoder: ``onnxruntime`` or ``openvino`` as asked;
    ``auto`` picks OpenVINO for a graph quantised for it (the manifest's
    ``quantization.runtime``) when the package is installed and ONNX Runtime has no GPU here
    (GPUs run the fp32 bundle on CUDA), ONNX Runtime otherwise."""
    if asked == "openvino" and not openvino_installed():
        raise EncoderRuntimeError(
            "FRACTAL_ENCODER_RUNTIME=openvino, but the openvino package is not installed "
            "(pip install openvino)"
        )
    if asked != "auto":
        return asked
    made_for = manifest.quantization.runtime if manifest.quantization else "onnxruntime"
    on_cpu = CUDA not in ort.get_available_providers()
    if made_for == "openvino" and on_cpu and openvino_installed():
        return "openvino"
    return "onnxruntime"


@dataclass(frozen=True)
class Encoded:
    """Full, unnormalised embeddings ``(n, dim)`` and the tokens each text was read as."""

    vectors: np.ndarray
    tokens: np.ndarray


class OnnxEncoder:
    """Texts (or token ids) → full embeddings, in sub-batches of at most ``batch_tokens``
    padded tokens, on ``runtime`` (:func:`chosen_runtime`; OpenVINO computes floating-point
    parts in ``precision``, see :class:`bundle.openvino_session.OpenVinoSession`). Thread-safe,
    but meant for one thread. With ``nice`` > 0 the session's own threads run that many nice
    values below the process (:mod:`encoding.priority`); the thread that calls it is lowered by
    its caller."""

    def __init__(
        self,
        bundle_dir: Path,
        manifest: Manifest,
        threads: int,
        spin: bool = False,
        runtime: EncoderRuntime = "auto",
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        precision: str = "f32",
        nice: int = 0,
        shape_buckets: bool = True,
    ) -> None:
        if batch_tokens < 1:
            raise ValueError(f"batch_tokens must be at least 1, got {batch_tokens}")
        self.dim = manifest.dim
        self.max_tokens = manifest.backbone.max_tokens
        self.tokenizer = Tokenizer.from_file(str(bundle_dir / TOKENIZER_FILE))
        self.vocabulary_size = self.tokenizer.get_vocab_size(with_added_tokens=True)
        padding = self.tokenizer.padding
        self.pad_id = padding["pad_id"] if padding else 0
        self.runtime = chosen_runtime(runtime, manifest)
        graph = bundle_dir / ENCODER_FILE
        self.session: ort.InferenceSession | OpenVinoSession = made_at_lower_priority(
            lambda: (
                OpenVinoSession(graph, threads, precision)
                if self.runtime == "openvino"
                else onnx_session(graph, threads, spin)
            ),
            nice,
        )
        self.threads = threads
        self.nice = nice if per_thread() else 0  # as /info reports it
        self.spin = spin and self.runtime == "onnxruntime"  # as /info reports it
        self.shape_buckets = shape_buckets and self.runtime == "openvino"  # as /info reports it
        self.batch_tokens = batch_tokens

    @property
    def providers(self) -> list[str]:
        return list(self.session.get_providers())

    def token_ids(self, inputs: Sequence[EncoderInput]) -> list[TokenIds]:
        """Each input as the token ids the graph reads: a text tokenised (without the
        tokenizer's padding), token ids as given."""
        texts = [item for item in inputs if isinstance(item, str)]
        encodings = iter(self.tokenizer.encode_batch(texts) if texts else ())
        sequences: list[TokenIds] = []
        for item in inputs:
            if isinstance(item, str):
                encoding = next(encodings)
                pairs = zip(encoding.ids, encoding.attention_mask, strict=True)
                sequences.append(tuple(token for token, real in pairs if real))
            else:
                sequences.append(item)
        return sequences

    def sub_batches(self, lengths: np.ndarray) -> list[np.ndarray]:
        """The positions of each sub-batch :meth:`encode` runs for inputs of these token
        counts."""
        return token_batches(lengths, self.batch_tokens)

    def encode(self, inputs: Sequence[EncoderInput]) -> Encoded:
        """Full embeddings of texts or token ids, in their order, and the tokens each was read
        as; run in :meth:`sub_batches`."""
        sequences = self.token_ids(inputs)
        lengths = np.array([len(ids) for ids in sequences], dtype=np.int64)
        vectors = np.empty((len(sequences), self.dim), dtype=np.float32)
        for positions in self.sub_batches(lengths):
            vectors[positions] = self._run([sequences[p] for p in positions])
        return Encoded(vectors, lengths)

    def input_shape(self, rows: int, longest: int) -> tuple[int, int]:
        """The ``(rows, tokens)`` shape of the call that encodes ``rows`` sequences, the longest
        of ``longest`` tokens: exact, or with :attr:`shape_buckets` the bucket holding it."""
        if self.shape_buckets:
            return bucketed_shape(rows, longest, self.max_tokens)
        return rows, longest

    def _run(self, sequences: list[TokenIds]) -> np.ndarray:
        """One graph call of the sequences at :meth:`input_shape`."""
        return self.run_padded(
            sequences, self.input_shape(len(sequences), max(len(ids) for ids in sequences))
        )

    def run_padded(self, sequences: Sequence[TokenIds], shape: tuple[int, int]) -> np.ndarray:
        """One graph call: the sequences padded on the right to ``shape`` (at least their count
        and their longest), with their attention mask; filler rows (copies of the first
        sequence) are dropped from the answer."""
        count = len(sequences)
        input_ids = np.full(shape, self.pad_id, dtype=np.int64)
        attention_mask = np.zeros_like(input_ids)
        for row, ids in enumerate(sequences):
            input_ids[row, : len(ids)] = ids
            attention_mask[row, : len(ids)] = 1
        input_ids[count:] = input_ids[0]
        attention_mask[count:] = attention_mask[0]
        (vectors,) = self.session.run(
            [EMBEDDING], {INPUT_IDS: input_ids, ATTENTION_MASK: attention_mask}
        )
        if vectors.shape != (shape[0], self.dim):
            raise RuntimeError(
                f"{ENCODER_FILE} returned shape {vectors.shape}, expected ({shape[0]}, {self.dim})"
            )
        return vectors[:count]
