"""Which runtime runs ``encoder.onnx`` (``FRACTAL_ENCODER_RUNTIME``), and OpenVINO's answers."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bundle import CosineToFP32, Quantization, load_bundle
from bundle.openvino_session import PROVIDER
from encoding import encoder as encoder_module
from encoding.encoder import EncoderRuntimeError, OnnxEncoder, chosen_runtime

TEXTS = ["book a table for two", "what is my balance", "a", "play some jazz music please"]


def made_for(manifest, runtime: str):
    """``manifest`` as if its encoder had been quantised for ``runtime``."""
    record = Quantization(
        method="test",
        weight_type="QInt8",
        per_channel=True,
        activations="uint8",
        source_bundle="source",
        source_bundle_hash="0" * 64,
        cosine_to_fp32=CosineToFP32(texts=1, mean=1.0, min=1.0),
        runtime=runtime,
    )
    return replace(manifest, quantization=record)


def test_auto_runs_an_fp32_bundle_on_onnx_runtime(tiny_bundle_dir: Path) -> None:
    manifest = load_bundle(tiny_bundle_dir)
    assert chosen_runtime("auto", manifest) == "onnxruntime"
    assert chosen_runtime("auto", made_for(manifest, "onnxruntime")) == "onnxruntime"
    assert chosen_runtime("openvino", manifest) == "openvino"


def test_auto_runs_a_graph_made_for_openvino_there_on_cpu(tiny_bundle_dir: Path) -> None:
    manifest = made_for(load_bundle(tiny_bundle_dir), "openvino")
    assert chosen_runtime("auto", manifest) == "openvino"
    assert chosen_runtime("onnxruntime", manifest) == "onnxruntime"


def test_without_the_package_auto_falls_back_and_openvino_is_refused(
    tiny_bundle_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(encoder_module, "openvino_installed", lambda: False)
    manifest = made_for(load_bundle(tiny_bundle_dir), "openvino")
    assert chosen_runtime("auto", manifest) == "onnxruntime"
    with pytest.raises(EncoderRuntimeError, match="pip install openvino"):
        chosen_runtime("openvino", manifest)


def test_openvino_gives_onnx_runtimes_vectors(tiny_bundle_dir: Path) -> None:
    manifest = load_bundle(tiny_bundle_dir)
    onnx = OnnxEncoder(tiny_bundle_dir, manifest, threads=1, runtime="onnxruntime")
    openvino = OnnxEncoder(tiny_bundle_dir, manifest, threads=1, runtime="openvino")
    assert openvino.providers == [PROVIDER] and PROVIDER not in onnx.providers
    expected, got = onnx.encode(TEXTS), openvino.encode(TEXTS)
    np.testing.assert_array_equal(got.tokens, expected.tokens)
    np.testing.assert_allclose(got.vectors, expected.vectors, rtol=1e-4, atol=1e-5)


def test_openvino_serves_threads_at_once(tiny_bundle_dir: Path) -> None:
    """Each thread has its own infer request: concurrent calls get their own answers."""
    manifest = load_bundle(tiny_bundle_dir)
    openvino = OnnxEncoder(tiny_bundle_dir, manifest, threads=1, runtime="openvino")
    alone = {text: openvino.encode([text]).vectors[0] for text in TEXTS}
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda text: openvino.encode([text]).vectors[0], TEXTS * 25))
    for text, vector in zip(TEXTS * 25, answers, strict=True):
        np.testing.assert_allclose(vector, alone[text], rtol=1e-5, atol=1e-6)
