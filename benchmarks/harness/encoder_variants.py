"""Variants of a bundle's ``encoder.onnx`` for the encoder benchmark, each in its own folder.

A variant folder holds ``encoder.onnx`` (the variant graph) and a link to the bundle's
``tokenizer.json``, so the service's own :class:`service.encoder.OnnxEncoder` reads it exactly as
it reads a bundle. The bundle itself is never written to.

- ``fused``: the ONNX Runtime transformer optimiser's BERT fusions (LayerNorm, SkipLayerNorm,
  BiasGelu, attention where its pattern matches) applied offline and saved as fp32;
- ``int8_*``: :func:`training.quantize.quantize_encoder` of the bundle's graph: int8 weights of
  every MatMul/Gemm, activations quantised per batch at run time.
"""

from __future__ import annotations

import logging
from pathlib import Path

from onnxruntime.quantization import QuantType
from onnxruntime.transformers import optimizer

from bundle import ENCODER_FILE, TOKENIZER_FILE
from training.quantize import DynamicInt8

QUANTISATIONS: dict[str, DynamicInt8] = {
    "ort_int8_s8": DynamicInt8(QuantType.QInt8, per_channel=False),
    "ort_int8_u8": DynamicInt8(QuantType.QUInt8, per_channel=False),
    "ort_int8_s8_per_channel": DynamicInt8(QuantType.QInt8, per_channel=True),
}
"""The last is ``fractal quantize``'s default recipe."""


def variant_folder(bundle_dir: Path, folder: Path) -> Path:
    """``folder`` created, with a link to the bundle's tokenizer; the caller adds the graph."""
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / TOKENIZER_FILE
    if not link.exists():
        link.symlink_to((bundle_dir / TOKENIZER_FILE).resolve())
    return folder


def fused_variant(bundle_dir: Path, folder: Path) -> dict:
    """Write the transformer-optimiser variant to ``folder``; return the fusions it made."""
    target = variant_folder(bundle_dir, folder)
    # The optimiser logs every pattern it fails to match at WARNING; those are expected here.
    logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
    model = optimizer.optimize_model(
        str(bundle_dir / ENCODER_FILE), model_type="bert", num_heads=0, hidden_size=0, opt_level=1
    )
    model.save_model_to_file(str(target / ENCODER_FILE))
    fused = model.get_fused_operator_statistics()
    return {name: count for name, count in fused.items() if count}


def quantised_variant(bundle_dir: Path, folder: Path, recipe: DynamicInt8) -> None:
    """Write the dynamically quantised graph of the bundle's encoder to ``folder``."""
    target = variant_folder(bundle_dir, folder)
    recipe.quantize(bundle_dir / ENCODER_FILE, target / ENCODER_FILE, None, [])
