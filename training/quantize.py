"""Dynamic int8 quantisation of a bundle's encoder: ``fractal quantize``.

ONNX Runtime's ``quantize_dynamic`` stores the weights of every MatMul / Gemm of ``encoder.onnx``
as int8 and quantises activations per batch at run time. The encoder benchmark
(``benchmarks/encoder_throughput``) measured the default recipe here, QInt8 weights with
per-channel scales, at about 1.8× the fp32 graph's throughput on one CPU thread for 0.4 points of
CLINC-150 k-NN accuracy; per-tensor scales cost 1.7 points.

The result is a new bundle: every file of the source copied, ``encoder.onnx`` replaced, and the
manifest's ``quantization`` saying how it was made, from which bundle (its content hash) and how
close its embeddings stay to the fp32 graph's on the check texts. Its content hash differs from
the source's, so the service will not mix its vectors with an index built by the fp32 encoder.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from onnxruntime.quantization import QuantType, quantize_dynamic

from bundle import (
    ENCODER_FILE,
    CosineToFP32,
    Manifest,
    Quantization,
    check_out_dir,
    install_bundle,
    load_bundle,
    staging_dir,
)
from training.bundle_embeddings import onnx_embeddings
from training.errors import FractalError, bundle_errors_as_fractal

MIN_MEAN_COSINE = 0.9
"""Below this mean cosine to the fp32 embeddings the quantised graph is refused as broken. The
encoder benchmark measured 0.992 for the default recipe and 0.967 for per-tensor QInt8 (which
costs 1.7 k-NN points)."""


@dataclass(frozen=True)
class Quantisation:
    """One ``quantize_dynamic`` recipe."""

    weight_type: QuantType = QuantType.QInt8
    per_channel: bool = True

    def describe(self) -> str:
        scale = "per-channel" if self.per_channel else "per-tensor"
        return f"dynamic int8, {self.weight_type.name} weights ({scale}), uint8 activations"

    def to_json(self) -> dict[str, object]:
        """The recipe's fields of the manifest's :class:`bundle.Quantization`."""
        return {
            "method": "onnxruntime.quantization.quantize_dynamic",
            "weight_type": self.weight_type.name,
            "per_channel": self.per_channel,
            "activations": "uint8, scale per batch at run time",
        }


def quantize_encoder(source: Path, target: Path, recipe: Quantisation) -> None:
    """Write the dynamically quantised graph of the ONNX model ``source`` to ``target``."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # quantize_dynamic warns "consider pre-processing" every call
    try:
        quantize_dynamic(
            source, target, weight_type=recipe.weight_type, per_channel=recipe.per_channel
        )
    finally:
        root.setLevel(level)


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine of each row of ``a`` with the same row of ``b``."""
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.sum(a * b, axis=1) / np.maximum(norms, 1e-12)


def quantize_bundle(
    bundle_dir: Path,
    out_dir: Path,
    check_texts: Sequence[str],
    *,
    recipe: Quantisation = Quantisation(),
    name: str | None = None,
    overwrite: bool = False,
) -> Manifest:
    """Write the int8 twin of the bundle at ``bundle_dir`` to ``out_dir`` (named ``name``,
    default ``<source name>-int8``) and return its manifest.

    ``check_texts`` are embedded by both graphs; their cosines are recorded, and a mean below
    :data:`MIN_MEAN_COSINE` fails. Raises :class:`FractalError` for a bad source, an occupied
    ``out_dir`` without ``overwrite``, or a failed check; ``out_dir`` is written only on success.
    """
    bundle_dir, out_dir = Path(bundle_dir), Path(out_dir)
    with bundle_errors_as_fractal():
        source = load_bundle(bundle_dir)
    if source.quantization is not None:
        raise FractalError(f"{bundle_dir} is already quantised ({source.quantization})")
    if out_dir.resolve() == bundle_dir.resolve():
        raise FractalError("--out must differ from the source bundle (bundles are immutable)")
    with bundle_errors_as_fractal():
        check_out_dir(out_dir, overwrite)
    texts = [text for text in check_texts if isinstance(text, str) and text.strip()]
    if not texts:
        raise FractalError("quantisation needs some non-empty check texts")
    with staging_dir(out_dir) as staging:
        for relative in source.files:
            if relative != ENCODER_FILE:
                (staging / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(bundle_dir / relative, staging / relative)
        quantize_encoder(bundle_dir / ENCODER_FILE, staging / ENCODER_FILE, recipe)
        cosines = row_cosines(onnx_embeddings(bundle_dir, texts), onnx_embeddings(staging, texts))
        mean = float(np.mean(cosines))
        if not mean >= MIN_MEAN_COSINE:
            raise FractalError(
                f"the quantised encoder's embeddings have mean cosine {mean:.4f} to the fp32 "
                f"ones (at least {MIN_MEAN_COSINE} expected): not written"
            )
        quantization = Quantization(
            **recipe.to_json(),
            source_bundle=source.name,
            source_bundle_hash=source.content_hash,
            cosine_to_fp32=CosineToFP32(
                texts=len(texts), mean=round(mean, 6), min=round(float(np.min(cosines)), 6)
            ),
        )
        draft = replace(
            source,
            name=name or f"{source.name}-int8",
            quantization=quantization,
            created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )
        return install_bundle(staging, draft, out_dir)
