"""An MSHC bundle: the MRL head as ``encoder.onnx`` (prefixes 96 … 384, so the service serves the
MRL prefixes unchanged), plus the extra parts the manifest's ``compression`` describes:
``pq_codebooks.npy`` (the 8-byte PQ of the unit 96-d prefix) and ``sae.onnx`` (unit 96-d prefix →
32-d code, the SAE encoder after distillation). No ``heads.onnx``: the head is trained on the
finest labels only. ``sae.onnx`` is checked against torch like ``encoder.onnx``.
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path

import numpy as np
import torch

from bundle import (
    COARSE,
    EMBEDDING,
    FINE,
    PQ_CODEBOOKS_FILE,
    SAE_CODE,
    SAE_FILE,
    Compression,
    Manifest,
    PQPart,
    SAEPart,
)
from training.bundle_embeddings import cpu_session
from training.data.dataset import LabelHierarchy
from training.errors import FractalError
from training.evaluation.shortlist import ShortlistMeasurement
from training.export import export_bundle, export_onnx, max_abs_diff
from training.frozen_encoder import FrozenEncoder
from training.mshc.pipeline import MSHCModel
from training.mshc.pq import ProductQuantizer

FLOAT_BYTES = 4


def compression_manifest(model: MSHCModel, pq: ProductQuantizer) -> Compression:
    """The manifest's ``compression`` entry for ``model`` and the served ``pq``."""
    config = model.config
    return Compression(
        pq=PQPart(
            file=PQ_CODEBOOKS_FILE,
            dim=pq.dim,
            m=pq.m,
            nbits=pq.nbits,
            shape=tuple(pq.codebooks.shape),
            bytes_per_vector=pq.bytes_per_vector(),
        ),
        sae=SAEPart(
            file=SAE_FILE,
            input_dim=config.coarse_dim,
            output_dim=config.code_dim,
            bytes_per_vector=FLOAT_BYTES * config.code_dim,
        ),
    )


def _write_sae(folder: Path, model: MSHCModel, check_features: np.ndarray) -> Path:
    path = folder / SAE_FILE
    student = copy.deepcopy(model.student).cpu().eval()
    export_onnx(
        student,
        (torch.zeros(2, model.config.coarse_dim),),
        path,
        [EMBEDDING],
        [SAE_CODE],
        {EMBEDDING: {0: "batch"}, SAE_CODE: {0: "batch"}},
    )
    coarse = model.coarse(torch.from_numpy(np.asarray(check_features, np.float32)))
    with torch.inference_mode():
        expected = student(coarse).numpy()
    got = cpu_session(path).run([SAE_CODE], {EMBEDDING: coarse.numpy()})[0]
    max_abs_diff(SAE_FILE, got, expected)
    return path


def export_mshc_bundle(
    out_dir: Path,
    encoder: FrozenEncoder,
    model: MSHCModel,
    pq: ProductQuantizer,
    *,
    name: str,
    hierarchy: LabelHierarchy | None,
    evaluation: dict,
    report_files: dict[str, Path] | None,
    check_texts: list[str],
    overwrite: bool = False,
    shortlist: ShortlistMeasurement | None = None,
) -> Manifest:
    """Write the MSHC bundle of ``model`` (trained on ``encoder``'s features) to ``out_dir``;
    ``shortlist`` is C2F's measured shortlist prefix (see :func:`training.export.export_bundle`)."""
    config = model.config
    if config.skip:
        raise FractalError(
            f"only a complete MSHC pipeline is exported, not one without {config.skip}"
        )
    if pq.dim != config.coarse_dim:
        raise FractalError(
            f"the PQ is for {pq.dim}-d vectors, the coarse prefix is {config.coarse_dim}"
        )
    with tempfile.TemporaryDirectory(prefix="mshc-parts-") as tmp:
        folder = Path(tmp)
        np.save(folder / PQ_CODEBOOKS_FILE, pq.codebooks)
        sae_path = _write_sae(folder, model, encoder.encode(check_texts, progress=False))
        return export_bundle(
            out_dir,
            encoder,
            model.head,
            name=name,
            objective="mshc",
            prefix_dims=list(config.prefix_dims),
            granularity={COARSE: config.coarse_dim, FINE: config.dim},
            hierarchy=hierarchy,
            evaluation=evaluation,
            report_files=report_files,
            check_texts=check_texts,
            overwrite=overwrite,
            with_heads=False,
            extra_files={PQ_CODEBOOKS_FILE: folder / PQ_CODEBOOKS_FILE, SAE_FILE: sae_path},
            compression=compression_manifest(model, pq),
            shortlist=shortlist,
        )
