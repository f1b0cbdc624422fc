"""Fetch a named dataset from the Hugging Face hub when its files are not on disk.

The local files always win; the hub is tried only when one is missing, and only if the optional
``datasets`` package (``pip install 'fractal[hub]'``) is installed and the hub answers. A fetched
dataset is written into the data folder in the very layout the local loaders read, so the
loaders' own checks apply to it and later runs need no network.

* Banking77: ``PolyAI/banking77`` → ``banking77/train.csv`` and ``test.csv`` (``text,category``).
* CLINC-150: ``clinc/clinc_oos`` (formerly ``clinc_oos``) config ``plus`` →
  ``clinc150/data_full.json``. Its in-scope rows are those of clinc/oos-eval's
  ``data_full.json``; its out-of-scope training split has 250 rows instead of 100. The
  hub has no domain labels, so ``clinc150/domains.json`` (the intent → domain map, 4 KB, from
  clinc/oos-eval's ``data/domains.json``) must be on disk for both CLINC variants; without it
  nothing is downloaded and the error says where to put it.

When the hub cannot help, :class:`FractalError` names the missing path and ``FRACTAL_DATA_DIR``.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from training.data.clinc import OUT_OF_SCOPE
from training.errors import FractalError

CLINC_HUB_ID, CLINC_HUB_CONFIG = "clinc/clinc_oos", "plus"
BANKING77_HUB_ID = "PolyAI/banking77"

# Hub split name → key of CLINC's data_full.json (out-of-scope rows go under "oos_" + key).
_CLINC_SPLIT_KEYS = {"train": "train", "validation": "val", "test": "test"}


def _not_found(title: str, missing: Iterable[Path], data_dir: Path, subfolder: str) -> str:
    return (
        f"{title} file(s) not found: {', '.join(str(path) for path in missing)}. "
        f"Put them there, or set FRACTAL_DATA_DIR to the folder that holds {subfolder}/ "
        f"(the data folder now is {data_dir})."
    )


def _load_from_hub(hub_id: str, config: str | None, not_found: str) -> Any:
    """The hub's ``DatasetDict`` for ``hub_id``; a FractalError starting with ``not_found`` if
    the ``datasets`` package is missing or the download fails."""
    try:
        import datasets
    except ImportError:
        raise FractalError(
            f"{not_found} Fetching {hub_id} from the Hugging Face hub instead needs the "
            "'datasets' package (pip install 'fractal[hub]'), which is not installed."
        ) from None
    try:
        return datasets.load_dataset(hub_id, config)
    except Exception as exc:  # any failure of the download means: not available
        raise FractalError(
            f"{not_found} Fetching {hub_id} from the Hugging Face hub failed too: {exc}"
        ) from exc


def _hub_rows(dataset_dict: Any, label_field: str) -> Iterator[tuple[str, str, str]]:
    """``(hub split, text, label name)`` for every row of a hub ``DatasetDict``."""
    for split, table in dataset_dict.items():
        names = table.features[label_field].names
        for text, label in zip(table["text"], table[label_field], strict=True):
            yield split, text, names[label]


def _write_atomically(path: Path, content: str) -> None:
    partial = path.with_name(path.name + ".part")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(content, encoding="utf-8")
        partial.replace(path)
    except OSError as exc:
        raise FractalError(f"cannot write the hub copy to {path}: {exc}") from exc


def write_clinc150_files(folder: Path, rows: Iterable[tuple[str, str, str]]) -> None:
    """Write ``(hub split, text, intent)`` rows as ``folder/data_full.json`` (clinc/oos-eval's
    layout: ``train``, ``val``, ``test`` and their ``oos_`` counterparts, lists of
    ``[text, intent]``)."""
    layout: dict[str, list[list[str]]] = {}
    for key in _CLINC_SPLIT_KEYS.values():
        layout[key], layout[f"oos_{key}"] = [], []
    for split, text, intent in rows:
        key = _CLINC_SPLIT_KEYS[split]
        layout[f"oos_{key}" if intent == OUT_OF_SCOPE else key].append([text, intent])
    _write_atomically(folder / "data_full.json", json.dumps(layout))


def write_banking77_files(folder: Path, rows: Iterable[tuple[str, str, str]]) -> None:
    """Write ``(split, text, category)`` rows as ``folder/<split>.csv`` with a ``text,category``
    header, one file per split."""
    by_split: dict[str, list[tuple[str, str]]] = {}
    for split, text, category in rows:
        by_split.setdefault(split, []).append((text, category))
    for split, split_rows in by_split.items():
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(("text", "category"))
        writer.writerows(split_rows)
        _write_atomically(folder / f"{split}.csv", buffer.getvalue())


def ensure_clinc150_files(data_dir: Path) -> None:
    """Make sure ``clinc150/data_full.json`` and ``domains.json`` exist under ``data_dir``,
    downloading the rows from the hub if only ``data_full.json`` is missing."""
    folder = data_dir / "clinc150"
    data_file, domains_file = folder / "data_full.json", folder / "domains.json"
    missing = [path for path in (data_file, domains_file) if not path.is_file()]
    if not missing:
        return
    not_found = _not_found("CLINC-150", missing, data_dir, "clinc150")
    if domains_file in missing:
        raise FractalError(
            f"{not_found} The Hugging Face hub's {CLINC_HUB_ID} has no domain labels, so "
            f"{domains_file} is needed even to fetch the rows from it: copy data/domains.json "
            "of github.com/clinc/oos-eval there."
        )
    hub_dataset = _load_from_hub(CLINC_HUB_ID, CLINC_HUB_CONFIG, not_found)
    write_clinc150_files(folder, _hub_rows(hub_dataset, "intent"))


def ensure_banking77_files(data_dir: Path) -> None:
    """Make sure ``banking77/train.csv`` and ``test.csv`` exist under ``data_dir``, downloading
    them from the hub if not."""
    folder = data_dir / "banking77"
    missing = [path for path in (folder / "train.csv", folder / "test.csv") if not path.is_file()]
    if not missing:
        return
    not_found = _not_found("Banking77", missing, data_dir, "banking77")
    hub_dataset = _load_from_hub(BANKING77_HUB_ID, None, not_found)
    write_banking77_files(folder, _hub_rows(hub_dataset, "label"))
