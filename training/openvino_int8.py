"""Static int8 quantisation of ``encoder.onnx`` for OpenVINO, with NNCF.

NNCF's post-training quantisation (``nncf.quantize``, transformer preset) runs the fp32 graph on
calibration texts, fixes a scale for every activation that feeds a MatMul, and writes the graph
back as ONNX with QuantizeLinear/DequantizeLinear pairs around those MatMuls (weights
per-channel, symmetric). OpenVINO's CPU plugin turns each pair into an int8 kernel; LayerNorm,
Softmax and GELU stay in floating point, as the transformer preset asks.

Against ONNX Runtime's dynamic int8 (:class:`training.quantize.DynamicInt8`), nothing is
measured per batch at run time, and the attention matmuls are int8 too: the encoder benchmark
(``benchmarks/encoder_throughput``) measures the speed and quality of both. The graph is still
``encoder.onnx``, so ONNX Runtime runs it too, correctly but slower.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from tokenizers import Tokenizer

from bundle import ATTENTION_MASK, INPUT_IDS

CALIBRATION_TEXTS = 300
"""Texts the activation scales are fitted on (NNCF's default subset size)."""
CALIBRATION_SEED = 0


def calibration_texts(texts: Sequence[str]) -> list[str]:
    """At most :data:`CALIBRATION_TEXTS` of ``texts``, drawn at random (seeded) in their order:
    training splits are often grouped by label (CLINC-150's first 300 texts span 5 of its 150
    intents), and the scales should see every kind of text."""
    if len(texts) <= CALIBRATION_TEXTS:
        return list(texts)
    rng = np.random.default_rng(CALIBRATION_SEED)
    return [texts[i] for i in sorted(rng.choice(len(texts), CALIBRATION_TEXTS, replace=False))]


def calibration_feeds(tokenizer: Tokenizer, texts: Sequence[str]) -> Iterator[dict]:
    """One graph input per text: its token ids and an all-ones mask, batch of one (unpadded,
    so that no scale is fitted on padding)."""
    for encoding in tokenizer.encode_batch(list(texts)):
        pairs = zip(encoding.ids, encoding.attention_mask, strict=True)
        ids = np.array([[token for token, real in pairs if real]], dtype=np.int64)
        yield {INPUT_IDS: ids, ATTENTION_MASK: np.ones_like(ids)}


def quantize_for_openvino(
    source: Path, target: Path, tokenizer: Tokenizer, texts: Sequence[str]
) -> None:
    """Write NNCF's static int8 graph of the ONNX model ``source`` to ``target``, its scales
    fitted on :func:`calibration_texts` of ``texts``."""
    import nncf

    logging.getLogger("nncf").setLevel(logging.ERROR)  # one INFO line per quantised node
    chosen = calibration_texts(texts)
    dataset = nncf.Dataset(list(calibration_feeds(tokenizer, chosen)))
    model = nncf.quantize(
        onnx.load(str(source)),
        dataset,
        model_type=nncf.ModelType.TRANSFORMER,
        subset_size=len(chosen),
    )
    onnx.save(model, str(target))


@dataclass(frozen=True)
class OpenVinoInt8:
    """The recipe (:class:`training.quantize.Recipe`): :func:`quantize_for_openvino`."""

    runtime: str = "openvino"

    def describe(self) -> str:
        return (
            f"static int8 (NNCF, transformer preset), scales fitted on up to {CALIBRATION_TEXTS} "
            "training texts drawn at random, for OpenVINO"
        )

    def to_json(self) -> dict[str, object]:
        """The recipe's fields of the manifest's :class:`bundle.Quantization`."""
        return {
            "method": "nncf.quantize (ONNX QuantizeLinear/DequantizeLinear)",
            "weight_type": "QInt8",
            "per_channel": True,
            "activations": f"int8, static scales fitted on up to {CALIBRATION_TEXTS} training "
            f"texts drawn at random (seed {CALIBRATION_SEED})",
        }

    def quantize(self, source: Path, target: Path, tokenizer: Tokenizer, texts: list[str]) -> None:
        quantize_for_openvino(source, target, tokenizer, texts)
