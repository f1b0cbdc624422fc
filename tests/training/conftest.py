"""Shared fixtures: the real encoder and a small, real CLINC-150 subset with its features."""

from __future__ import annotations

import pytest

from training.frozen_encoder import FrozenEncoder
from training.prepared_data import DataConfig, PreparedData, prepare_data


@pytest.fixture(scope="session")
def encoder() -> FrozenEncoder:
    return FrozenEncoder()


@pytest.fixture(scope="session")
def small_clinc(encoder: FrozenEncoder, tmp_path_factory: pytest.TempPathFactory) -> PreparedData:
    """1,500 training and 300 test utterances of CLINC-150 with MiniLM features (cached)."""
    return prepare_data(DataConfig("clinc150", 1500, 300), encoder, progress=False)
