"""Real bundles for the service tests, exported once per test session.

The identity bundle is the raw MiniLM encoder (384-d, no heads); the V5 bundle is a small V5 head
trained on 1,500 CLINC-150 utterances for 3 epochs (coarse 64-d, fine 256-d, with heads); the
MSHC bundle is a quickly trained MSHC pipeline on the same rows (prefixes 96 … 384, 8-byte PQ
codebooks for the 96-d prefix, a 96 → 32 SAE graph).
Both the service and the end-to-end tests ask for them; each is built the first time and found
in the session's base temporary directory after that. Exporting needs torch: where it is absent,
a test that asks for one of these bundles is skipped (:mod:`tests.tiny_bundle` needs no torch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from bundle import MANIFEST_FILE
from training.data.dataset import DatasetSplits
from training.data.registry import load_dataset

if TYPE_CHECKING:
    from training.frozen_encoder import FrozenEncoder

CLINC_TRAIN = 1500
CLINC_TEST = 300
CHECK_TEXTS = [
    "how do i transfer money to my savings account",
    "set an alarm for seven tomorrow morning",
    "what is the weather like in paris",
    "book a table for two at an italian place tonight",
    "a longer text, so that one check batch has padding in it: "
    "my credit card was declined at the store and i would like to know why",
]


@cache
def encoder() -> FrozenEncoder:
    from training.frozen_encoder import FrozenEncoder

    return FrozenEncoder()


@cache
def clinc() -> DatasetSplits:
    """The CLINC-150 rows the V5 bundle is trained on (train) and held out from (test)."""
    return load_dataset("clinc150", seed=42, max_train=CLINC_TRAIN, max_test=CLINC_TEST)


def _build_identity(out: Path) -> None:
    from training.export import export_identity_bundle

    export_identity_bundle(out, encoder(), check_texts=CHECK_TEXTS)


def _build_v5(out: Path) -> None:
    from training.export import export_bundle
    from training.head_job import train
    from training.prepared_data import DataConfig, prepare_data
    from training.train_config import TrainConfig

    data = prepare_data(DataConfig("clinc150", CLINC_TRAIN, CLINC_TEST), encoder(), progress=False)
    result = train(data, TrainConfig(epochs=3, learning_rate=1e-3, seed=42), progress=False)
    dims = list(result.config.prefix_dims)
    export_bundle(
        out,
        encoder(),
        result.head,
        name="clinc150-v5-small",
        objective="v5",
        prefix_dims=dims,
        granularity={"coarse": dims[0], "fine": dims[-1]},
        hierarchy=data.hierarchy,
        evaluation={},
        report_files=None,
        check_texts=CHECK_TEXTS,
    )


@cache
def small_mshc():
    """A quickly trained MSHC model on the V5 bundle's rows, its 96-d PQ and the data (the same
    objects for every caller, so that a test can compare the exported bundle with them)."""
    from training.mshc.pipeline import MSHCConfig, train_mshc
    from training.mshc.pq import ProductQuantizer
    from training.prepared_data import DataConfig, prepare_data

    data = prepare_data(DataConfig("clinc150", CLINC_TRAIN, CLINC_TEST), encoder(), progress=False)
    config = MSHCConfig(mrl_epochs=3, vq_epochs=3, sae_epochs=2, kd_epochs=2)
    model = train_mshc(
        data.train_features, data.splits.train.labels[:, -1], data.num_classes[-1], config
    )
    coarse = model.coarse(torch_from(data.train_features)).numpy()
    return model, ProductQuantizer.trained(coarse), data


def torch_from(array):
    import numpy as np
    import torch

    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))


def _build_mshc(out: Path) -> None:
    from training.mshc.export import export_mshc_bundle

    model, pq, data = small_mshc()
    export_mshc_bundle(
        out,
        encoder(),
        model,
        pq,
        name="clinc150-mshc-small",
        hierarchy=data.hierarchy,
        evaluation={},
        report_files=None,
        check_texts=CHECK_TEXTS,
    )


@contextmanager
def _one_torch_thread() -> Iterator[None]:
    """Build on one torch thread: on a small, shared machine more threads contend and run many
    times slower (the 3 training epochs took 2 s on one thread and 35 s on two, under load)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _session_bundle(
    factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]
) -> Path:
    pytest.importorskip("torch", reason="the real bundles are exported with torch")
    path = factory.getbasetemp() / "bundles" / name
    if not (path / MANIFEST_FILE).is_file():
        with _one_torch_thread():
            build(path)
    return path


def identity_bundle(factory: pytest.TempPathFactory) -> Path:
    return _session_bundle(factory, "identity", _build_identity)


def v5_bundle(factory: pytest.TempPathFactory) -> Path:
    return _session_bundle(factory, "v5", _build_v5)


def mshc_bundle(factory: pytest.TempPathFactory) -> Path:
    return _session_bundle(factory, "mshc", _build_mshc)
