"""The encoder benchmark's served runtime answers concurrent one-text callers with the
encoder's own vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.harness.served_runtime import ServedRuntime
from bundle import load_bundle
from encoding.encoder import OnnxEncoder
from tests.service.helpers import make_settings

TEXTS = ["hello", "what is my balance", "a somewhat longer text than the others", "ok"] * 20


def test_concurrent_callers_get_the_encoders_vectors(tmp_path: Path, tiny_bundle_dir: Path) -> None:
    settings = make_settings(tiny_bundle_dir, tmp_path / "index", max_batch_size=8)
    expected = OnnxEncoder(tiny_bundle_dir, load_bundle(tiny_bundle_dir), threads=1).encode(TEXTS)

    with ServedRuntime(settings) as served:
        vectors = served.encode(TEXTS)
        texts, calls = served.encoder_calls()
        batcher = served.runtime.batcher
        assert batcher.running

    assert not batcher.running
    assert texts == len(TEXTS) and calls < len(TEXTS)  # the queue gathered the callers' texts
    np.testing.assert_allclose(vectors, expected.vectors, rtol=1e-5, atol=1e-6)
