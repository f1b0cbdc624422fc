"""One entry point from a dataset name or a file path to train/test splits.

Named datasets read their files from the data folder (``FRACTAL_DATA_DIR``), falling back to the
Hugging Face hub (see :mod:`training.data.hub`); any other existing path goes to the generic
loader (:mod:`training.data.generic`). Both splits are then subsampled with a seed, as in the
Fractal Embeddings paper (at most 10,000 training and 2,000 test texts).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from training.data.banking77 import load_banking77
from training.data.clinc import load_clinc150
from training.data.dataset import DatasetSplits
from training.data.generic import FILE_FORMATS, load_labelled_files
from training.data.hub import ensure_banking77_files, ensure_clinc150_files
from training.errors import FractalError

DATASETS = ("clinc150", "clinc150-3level", "banking77")
DATA_DIR_VARIABLE = "FRACTAL_DATA_DIR"
# The shared data folder sits next to the project's checkout: <checkout>/../shared/data.
DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def data_dir() -> Path:
    """The data folder: ``$FRACTAL_DATA_DIR`` if set, else :data:`DEFAULT_DATA_DIR`.

    The default is resolved from this file, not the working directory, so it is the same
    wherever a command runs. Raises :class:`FractalError` if the folder does not exist.
    """
    configured = os.environ.get(DATA_DIR_VARIABLE)
    if configured:
        folder = Path(configured).expanduser()
        if not folder.is_dir():
            raise FractalError(f"{DATA_DIR_VARIABLE}={configured} is not a folder")
        return folder
    if not DEFAULT_DATA_DIR.is_dir():
        raise FractalError(
            f"{DATA_DIR_VARIABLE} is not set and the default data folder {DEFAULT_DATA_DIR} "
            f"does not exist: set {DATA_DIR_VARIABLE} to the folder that holds clinc150/ and "
            "banking77/"
        )
    return DEFAULT_DATA_DIR


# load_dataset's ``data_dir`` parameter shadows the function inside it.
_default_data_dir = data_dir


def _load_named(name: str, folder: Path) -> DatasetSplits:
    if name == "banking77":
        ensure_banking77_files(folder)
        return load_banking77(folder)
    ensure_clinc150_files(folder)
    return load_clinc150(folder, levels=3 if name == "clinc150-3level" else 2)


def load_dataset(
    name_or_path: str,
    *,
    data_dir: Path | None = None,
    seed: int = 42,
    max_train: int | None = 10000,
    max_test: int | None = 2000,
    **generic_options: Any,
) -> DatasetSplits:
    """Train/test splits of a named dataset (:data:`DATASETS`) or of the file(s) at a path.

    A name in :data:`DATASETS` wins over a path of the same name. ``data_dir`` overrides
    :func:`data_dir` for named datasets. ``generic_options`` are the keyword arguments of
    :func:`~training.data.generic.load_labelled_files` and only apply to paths; ``seed`` drives
    both the generic loader's train/test split and the subsampling. ``max_train``/``max_test``
    cap each split (None keeps every row); the same seed always gives the same rows.
    """
    for cap_name, cap in (("max_train", max_train), ("max_test", max_test)):
        if cap is not None and cap < 1:
            raise FractalError(f"{cap_name} must be at least 1 (or None for all rows), got {cap}")
    if name_or_path in DATASETS:
        if generic_options:
            raise FractalError(
                f"options {', '.join(sorted(generic_options))} apply to your own files, "
                f"not to the named dataset {name_or_path!r}"
            )
        folder = data_dir if data_dir is not None else _default_data_dir()
        splits = _load_named(name_or_path, folder)
    elif Path(name_or_path).exists():
        splits = load_labelled_files(Path(name_or_path), seed=seed, **generic_options)
    else:
        raise FractalError(
            f"unknown dataset {name_or_path!r}: choose one of {', '.join(DATASETS)} or give a "
            f"path to a {'/'.join(FILE_FORMATS).upper()} file"
        )
    return DatasetSplits(
        train=splits.train.sample(max_train, seed), test=splits.test.sample(max_test, seed)
    )
