"""The MSHC bundle round trip: ONNX graphs against the torch stages, and what export refuses."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from tokenizers import Tokenizer

from bundle import (
    EMBEDDING,
    ENCODER_FILE,
    HEADS_FILE,
    PQ_CODEBOOKS_FILE,
    SAE_CODE,
    SAE_FILE,
    TOKENIZER_FILE,
    load_bundle,
)
from tests.service.bundles import CHECK_TEXTS, encoder, mshc_bundle, small_mshc, torch_from
from training.errors import FractalError
from training.mshc.export import export_mshc_bundle
from training.mshc.pq import ProductQuantizer


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return mshc_bundle(tmp_path_factory)


def _session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_onnx_graphs_match_the_torch_stages(bundle_dir: Path) -> None:
    model, pq, _ = small_mshc()
    manifest = load_bundle(bundle_dir)
    assert HEADS_FILE not in manifest.files
    encoder_session = _session(bundle_dir / ENCODER_FILE)
    tokenizer = Tokenizer.from_file(str(bundle_dir / TOKENIZER_FILE))
    torch_full = model.full(torch_from(encoder().encode(CHECK_TEXTS, progress=False))).numpy()
    onnx_full = []
    for text in CHECK_TEXTS:
        encoding = tokenizer.encode(text)
        feeds = {
            "input_ids": np.array([encoding.ids], dtype=np.int64),
            "attention_mask": np.array([encoding.attention_mask], dtype=np.int64),
        }
        onnx_full.append(encoder_session.run([EMBEDDING], feeds)[0][0])
    onnx_full = np.array(onnx_full)
    assert onnx_full.shape == (len(CHECK_TEXTS), 384)
    np.testing.assert_allclose(onnx_full, torch_full, atol=1e-3)

    coarse = onnx_full[:, :96] / np.linalg.norm(onnx_full[:, :96], axis=1, keepdims=True)
    code = _session(bundle_dir / SAE_FILE).run([SAE_CODE], {EMBEDDING: coarse.astype(np.float32)})
    with torch.no_grad():
        expected = model.student(torch_from(coarse)).numpy()
    assert code[0].shape == (len(CHECK_TEXTS), 32)
    np.testing.assert_allclose(code[0], expected, atol=1e-3)
    np.testing.assert_array_equal(np.load(bundle_dir / PQ_CODEBOOKS_FILE), pq.codebooks)


def test_export_refuses_an_ablated_pipeline_or_a_mismatched_pq(tmp_path: Path) -> None:
    model, pq, data = small_mshc()
    options = {"name": "x", "hierarchy": data.hierarchy, "evaluation": {}, "report_files": None,
               "check_texts": CHECK_TEXTS}
    ablated = replace(model, config=replace(model.config, skip=("vq",)))
    with pytest.raises(FractalError, match="only a complete MSHC pipeline"):
        export_mshc_bundle(tmp_path / "a", encoder(), ablated, pq, **options)
    wrong = ProductQuantizer.trained(np.random.default_rng(0).random((300, 192), np.float32))
    with pytest.raises(FractalError, match="the PQ is for 192-d vectors"):
        export_mshc_bundle(tmp_path / "b", encoder(), model, wrong, **options)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
