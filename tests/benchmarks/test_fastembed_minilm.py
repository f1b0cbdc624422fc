"""The fastembed peer of the encoder benchmark runs the same model as sentence-transformers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from benchmarks.harness.fastembed_minilm import (
    export_fastembed_folder,
    fastembed_encode,
    fastembed_model,
)
from training.frozen_encoder import default_model_dir
from training.quantize import row_cosines

TEXTS = [
    "what is my balance",
    "how do i say hello in french",
    "the river flows through the old town before it reaches the sea near the harbour",
    # Over 256 tokens: both engines must cut it at the same place.
    " ".join(f"word{i}" for i in range(300)),
]


def test_fastembed_reads_the_exported_minilm_like_sentence_transformers(tmp_path: Path) -> None:
    model_dir = default_model_dir()
    folder = export_fastembed_folder(model_dir, tmp_path / "fastembed")
    model = fastembed_model(folder, threads=1)

    vectors = fastembed_encode(model, TEXTS, batch_size=3)  # a padded batch, then one text
    reference = SentenceTransformer(str(model_dir), device="cpu").encode(TEXTS)

    assert vectors.shape == (len(TEXTS), 384)
    assert np.linalg.norm(vectors, axis=1) == pytest.approx(1.0, abs=1e-5)
    assert row_cosines(vectors, reference).min() >= 0.999
    assert model.model.model.get_session_options().intra_op_num_threads == 1
