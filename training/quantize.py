"""Int8 quantisation of a bundle's encoder: the fast twin of a bundle.

Two recipes (:data:`RECIPES`), each for the runtime it runs fastest on:

- ``openvino-int8`` (the default, :class:`training.openvino_int8.OpenVinoInt8`): NNCF's static
  int8, scales fitted on the dataset's training texts, run by OpenVINO. The encoder benchmark
  (``benchmarks/encoder_throughput``) measured it fastest of the CPU recipes, and the closest
  to fp32;
- ``onnxruntime-int8`` (:class:`DynamicInt8`): ONNX Runtime's ``quantize_dynamic``, int8
  weights of every MatMul / Gemm with per-channel scales, activations quantised per batch at
  run time (per-tensor scales cost 1.7 k-NN points in the benchmark).

Both are CPU recipes: on CUDA integer operators fall back to the CPU, and the fp32 bundle is the
one to serve there.

The result is a new bundle: every file of the source copied, ``encoder.onnx`` replaced, and the
manifest's ``quantization`` saying how it was made, for which runtime, from which bundle (its
content hash) and what it costs against the fp32 graph on a labelled dataset (measured on the
runtime it is made for): the cosines of the two graphs' embeddings, and k-NN accuracy (coarse
labels at the coarse prefix, fine labels at the fine one). A twin that costs more than a bound
in either is refused. Its content hash differs from the source's, so the service will not mix
its vectors with an index built by the fp32 encoder.

``fractal quantize`` writes a twin of any bundle; ``fractal run`` and ``fractal export`` write one
beside the fp32 bundle they export (:func:`twin_dir`).
"""

from __future__ import annotations

import logging
import math
import shutil
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

import numpy as np
from onnxruntime.quantization import QuantType, quantize_dynamic
from tokenizers import Tokenizer

from bundle import (
    ENCODER_FILE,
    TOKENIZER_FILE,
    CosineToFP32,
    KnnCost,
    KnnProbe,
    Manifest,
    Quantization,
    check_out_dir,
    install_bundle,
    load_bundle,
    staging_dir,
)
from training.bundle_embeddings import onnx_embeddings
from training.data.dataset import DatasetSplits
from training.errors import FractalError, bundle_errors_as_fractal
from training.evaluation.knn import knn_accuracy_table
from training.openvino_int8 import OpenVinoInt8

MIN_MEAN_COSINE = 0.9
"""Below this mean cosine to the fp32 embeddings the quantised graph is refused as broken. The
encoder benchmark measured 0.996 for the default recipe (``openvino-int8``), 0.993 for dynamic
per-channel int8 and 0.968 for per-tensor QInt8 (which costs 1.3 k-NN points)."""

KNN_K = 5
"""Neighbours that vote in the k-NN probe, as in the bundle's own evaluation."""

TWIN_SUFFIX = "-int8"
"""A twin's name and folder are its source's with this suffix."""


class Recipe(Protocol):
    """How a twin's graph is made: the runtime it is for, a description, the manifest fields it
    fills, and the writing of the quantised graph (fitted on ``texts``, where it fits)."""

    runtime: str

    def describe(self) -> str: ...

    def to_json(self) -> dict[str, object]: ...

    def quantize(self, source: Path, target: Path, tokenizer: Tokenizer, texts: list[str]) -> None:
        """Write the quantised graph of the ONNX model ``source`` to ``target``."""
        ...


@dataclass(frozen=True)
class DynamicInt8:
    """One ``quantize_dynamic`` recipe, for ONNX Runtime."""

    weight_type: QuantType = QuantType.QInt8
    per_channel: bool = True
    runtime: str = "onnxruntime"

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

    def quantize(self, source: Path, target: Path, tokenizer: Tokenizer, texts: list[str]) -> None:
        """Nothing to fit: ``tokenizer`` and ``texts`` are not used."""
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)  # quantize_dynamic warns "consider pre-processing" each call
        try:
            quantize_dynamic(
                source, target, weight_type=self.weight_type, per_channel=self.per_channel
            )
        finally:
            root.setLevel(level)


RECIPES: dict[str, Recipe] = {"openvino-int8": OpenVinoInt8(), "onnxruntime-int8": DynamicInt8()}
"""The recipes by the name ``--recipe`` takes."""
DEFAULT_RECIPE = "openvino-int8"


def twin_dir(bundle_dir: Path) -> Path:
    """The folder of the fast twin that ``fractal run`` and ``fractal export`` write beside the
    bundle at ``bundle_dir``: ``runs/clinc150/bundle`` → ``runs/clinc150/bundle-int8``."""
    bundle_dir = Path(bundle_dir).resolve()
    return bundle_dir.with_name(bundle_dir.name + TWIN_SUFFIX)


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine of each row of ``a`` with the same row of ``b``."""
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.sum(a * b, axis=1) / np.maximum(norms, 1e-12)


def knn_cost(
    data: DatasetSplits, fp32: np.ndarray, quantized: np.ndarray, coarse_dim: int, fine_dim: int
) -> KnnCost:
    """k-NN accuracy (:data:`KNN_K`, cosine) of both graphs' embeddings of ``data``'s training
    texts then test texts (one row each, in that order): the first level's labels at
    ``coarse_dim``, the finest level's at ``fine_dim``, and the larger drop in points."""
    train_rows = len(data.train)
    tables = [
        knn_accuracy_table(
            vectors[:train_rows],
            data.train.labels,
            vectors[train_rows:],
            data.test.labels,
            [coarse_dim, fine_dim],
            k=KNN_K,
        )
        for vectors in (fp32, quantized)
    ]
    levels = data.hierarchy.level_names
    coarse, fine = (
        KnnProbe(
            level=levels[level],
            dim=dim,
            fp32=round(float(tables[0][level, column]), 6),
            quantized=round(float(tables[1][level, column]), 6),
        )
        for level, column, dim in ((0, 0, coarse_dim), (-1, 1, fine_dim))
    )
    return KnnCost(
        dataset=data.train.name,
        k=KNN_K,
        train_texts=train_rows,
        test_texts=len(data.test),
        coarse=coarse,
        fine=fine,
        points=round(100 * max(p.fp32 - p.quantized for p in (coarse, fine)), 4),
    )


def describe_knn_cost(cost: KnnCost) -> str:
    """``0.25 k-NN points (domain@64d 95.30% → 95.10%, intent@256d 94.85% → 94.60%)``."""
    probes = ", ".join(
        f"{p.level}@{p.dim}d {100 * p.fp32:.2f}% → {100 * p.quantized:.2f}%"
        for p in (cost.coarse, cost.fine)
    )
    return f"{cost.points:.2f} k-NN points ({probes})"


def _check_labels(source: Manifest, data: DatasetSplits, bundle_dir: Path) -> None:
    """The k-NN check's labels are those the bundle was trained on, when it records them."""
    if source.hierarchy is None:
        return
    trained = [(level.name, level.labels) for level in source.hierarchy]
    given = list(zip(data.hierarchy.level_names, data.hierarchy.label_names, strict=True))
    if trained != given:
        raise FractalError(
            f"{bundle_dir} was trained on other labels than those of dataset {data.train.name!r} "
            f"(levels {', '.join(name for name, _ in trained)}): pass the bundle's --dataset"
        )


def quantize_bundle(
    bundle_dir: Path,
    out_dir: Path,
    data: DatasetSplits,
    *,
    max_knn_cost_points: float,
    recipe: Recipe = RECIPES[DEFAULT_RECIPE],
    name: str | None = None,
    overwrite: bool = False,
) -> Manifest:
    """Write the int8 twin of the bundle at ``bundle_dir`` to ``out_dir`` (named ``name``,
    default the source's name + :data:`TWIN_SUFFIX`) and return its manifest.

    ``data`` (the bundle's dataset, or one with the same labels) is embedded by both graphs:
    the cosines of every text's two embeddings and the :func:`knn_cost` of its test texts among
    its training texts are recorded. A mean cosine below :data:`MIN_MEAN_COSINE`, or a k-NN cost
    above ``max_knn_cost_points``, fails. Raises :class:`FractalError` for a bad source, data
    with other labels, an occupied ``out_dir`` without ``overwrite``, or a failed check;
    ``out_dir`` is written only on success.
    """
    bundle_dir, out_dir = Path(bundle_dir), Path(out_dir)
    with bundle_errors_as_fractal():
        source = load_bundle(bundle_dir)
    if source.quantization is not None:
        raise FractalError(f"{bundle_dir} is already quantised ({source.quantization})")
    if out_dir.resolve() == bundle_dir.resolve():
        raise FractalError("--out must differ from the source bundle (bundles are immutable)")
    if math.isnan(max_knn_cost_points):
        raise FractalError("the k-NN cost bound (--max-knn-cost) must be a number of points")
    with bundle_errors_as_fractal():
        check_out_dir(out_dir, overwrite)
    if not len(data.train) or not len(data.test):
        raise FractalError("quantisation needs labelled training and test texts to check with")
    _check_labels(source, data, bundle_dir)
    texts = [*data.train.texts, *data.test.texts]
    with staging_dir(out_dir) as staging:
        for relative in source.files:
            if relative != ENCODER_FILE:
                (staging / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(bundle_dir / relative, staging / relative)
        tokenizer = Tokenizer.from_file(str(bundle_dir / TOKENIZER_FILE))
        train_texts = list(data.train.texts)
        recipe.quantize(bundle_dir / ENCODER_FILE, staging / ENCODER_FILE, tokenizer, train_texts)
        fp32 = onnx_embeddings(bundle_dir, texts)
        quantized = onnx_embeddings(staging, texts, recipe.runtime)
        cosines = row_cosines(fp32, quantized)
        mean = float(np.mean(cosines))
        if not mean >= MIN_MEAN_COSINE:
            raise FractalError(
                f"the quantised encoder's embeddings have mean cosine {mean:.4f} to the fp32 "
                f"ones (at least {MIN_MEAN_COSINE} expected): not written"
            )
        cost = knn_cost(data, fp32, quantized, source.coarse_dim, source.fine_dim)
        if cost.points > max_knn_cost_points:
            raise FractalError(
                f"the quantised encoder costs {describe_knn_cost(cost)} on "
                f"{cost.test_texts} {cost.dataset} test texts, more than the "
                f"{max_knn_cost_points:g} allowed (--max-knn-cost): not written"
            )
        quantization = Quantization(
            **recipe.to_json(),
            source_bundle=source.name,
            source_bundle_hash=source.content_hash,
            cosine_to_fp32=CosineToFP32(
                texts=len(texts), mean=round(mean, 6), min=round(float(np.min(cosines)), 6)
            ),
            knn_cost=cost,
            runtime=recipe.runtime,
        )
        draft = replace(
            source,
            name=name or source.name + TWIN_SUFFIX,
            quantization=quantization,
            created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )
        return install_bundle(staging, draft, out_dir)
