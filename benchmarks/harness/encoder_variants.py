"""Variants of a bundle's ``encoder.onnx`` for the encoder benchmark, each a graph in its own
folder and the runtime that runs it.

A variant folder holds ``encoder.onnx`` (the variant graph) and a link to the bundle's
``tokenizer.json``, so the service's own :class:`encoding.encoder.OnnxEncoder` reads it exactly as
it reads a bundle (with the variant's runtime and precision). The bundle itself is never written
to. The variants:

- ``ort_fp32``: the bundle's graph on ONNX Runtime, as the service runs an fp32 bundle;
- ``ort_fp32_fused``: the ONNX Runtime transformer optimiser's BERT fusions (LayerNorm,
  SkipLayerNorm, BiasGelu, attention where its pattern matches) applied offline, fp32;
- ``ort_int8_*``: :class:`training.quantize.DynamicInt8` recipes (int8 weights of every
  MatMul/Gemm, activations quantised per batch at run time), on ONNX Runtime;
- ``ov_fp32`` and ``ov_bf16``: the bundle's graph on OpenVINO, computing in fp32, or in bf16
  where the CPU has bf16 instructions (AVX512-BF16, AMX);
- ``ov_int8``: the fast twin's recipe (:class:`training.openvino_int8.OpenVinoInt8`, NNCF static
  int8 fitted on the calibration texts) on OpenVINO, and ``ort_ov_int8``: the same graph on ONNX
  Runtime (what a service without OpenVINO would do with the twin).
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from onnxruntime.quantization import QuantType
from onnxruntime.transformers import optimizer
from tokenizers import Tokenizer

from bundle import ENCODER_FILE, TOKENIZER_FILE
from training.openvino_int8 import OpenVinoInt8
from training.quantize import DynamicInt8

FP32 = "ort_fp32"
FUSED = "ort_fp32_fused"
OV_INT8 = "ov_int8"
DYNAMIC: dict[str, DynamicInt8] = {
    "ort_int8_s8": DynamicInt8(QuantType.QInt8, per_channel=False),
    "ort_int8_u8": DynamicInt8(QuantType.QUInt8, per_channel=False),
    "ort_int8_s8_per_channel": DynamicInt8(QuantType.QInt8, per_channel=True),
}
"""The last is ``fractal quantize --recipe onnxruntime-int8``."""


@dataclass(frozen=True)
class Variant:
    """A graph (``folder/encoder.onnx``), what runs it, and how it was made."""

    folder: Path
    runtime: str
    precision: str
    recipe: str


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
    # Where its symbolic shape inference stops short, the optimiser saves the partial graph
    # (90 MB) into the working directory; a scratch one keeps it out of the checkout.
    with tempfile.TemporaryDirectory() as scratch, contextlib.chdir(scratch):
        model = optimizer.optimize_model(
            str((bundle_dir / ENCODER_FILE).resolve()),
            model_type="bert",
            num_heads=0,
            hidden_size=0,
            opt_level=1,
        )
    model.save_model_to_file(str(target / ENCODER_FILE))
    fused = model.get_fused_operator_statistics()
    return {name: count for name, count in fused.items() if count}


def build_variants(
    bundle_dir: Path, work: Path, fused: bool, calibration: Sequence[str]
) -> dict[str, Variant]:
    """Every variant, written under ``work`` (``fused``: with the offline-fused graph; the
    static int8 graph fitted on ``calibration``)."""
    variants = {FP32: Variant(bundle_dir, "onnxruntime", "f32", "the bundle's encoder.onnx")}
    if fused:
        fusions = fused_variant(bundle_dir, work / FUSED)
        variants[FUSED] = Variant(
            work / FUSED, "onnxruntime", "f32", f"transformer optimiser (bert), fp32: {fusions}"
        )
    tokenizer = Tokenizer.from_file(str(bundle_dir / TOKENIZER_FILE))
    source = bundle_dir / ENCODER_FILE
    for name, recipe in DYNAMIC.items():
        folder = variant_folder(bundle_dir, work / name)
        recipe.quantize(source, folder / ENCODER_FILE, tokenizer, [])
        variants[name] = Variant(folder, "onnxruntime", "f32", recipe.describe())
    for precision in ("f32", "bf16"):
        variants[f"ov_{precision.replace('f32', 'fp32')}"] = Variant(
            bundle_dir, "openvino", precision, f"the bundle's encoder.onnx, {precision} compute"
        )
    folder = variant_folder(bundle_dir, work / OV_INT8)
    static = OpenVinoInt8()
    static.quantize(source, folder / ENCODER_FILE, tokenizer, list(calibration))
    variants[OV_INT8] = Variant(folder, "openvino", "f32", static.describe())
    variants["ort_ov_int8"] = Variant(
        folder, "onnxruntime", "f32", f"{OV_INT8}'s graph, on ONNX Runtime"
    )
    return variants
