"""Banking77 (Casanueva et al., 2020): 77 flat banking intents, one label level (``intent``).

Files: ``$FRACTAL_DATA_DIR/banking77/train.csv`` and ``test.csv``, columns ``text,category``.

The published ``train.csv`` breaks three texts over several lines without quoting them: the
first line(s) of such a text have no category, and the row that ends it has an empty text or a
lone ``.`` before the category. This loader joins those lines, with a space, into one row, which
gives the published 10,003 training rows; any other row without two fields is an error.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from training.data.dataset import DatasetSplits, build_hierarchy
from training.errors import FractalError

BANKING77_COLUMNS = ["text", "category"]


def _read_split(path: Path) -> list[tuple[str, tuple[str]]]:
    """``(text, (category,))`` rows of one Banking77 CSV file, broken texts rejoined."""
    if not path.is_file():
        raise FractalError(
            f"Banking77 file not found: {path}. Set FRACTAL_DATA_DIR to the folder holding "
            "banking77/train.csv and banking77/test.csv"
        )
    reader = csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"), newline=""))
    if next(reader, None) != BANKING77_COLUMNS:
        raise FractalError(f"{path}: the first line must be the header 'text,category'")
    rows: list[tuple[str, tuple[str]]] = []
    broken_text: list[str] = []
    for values in reader:
        if len(values) == 2:
            text = " ".join(part.strip() for part in (*broken_text, values[0]) if part.strip())
            rows.append((text, (values[1],)))
            broken_text = []
        elif len(values) == 1:
            broken_text.append(values[0])
        elif values:
            raise FractalError(
                f"{path}:{reader.line_num}: malformed row: {len(values)} fields, expected 2"
            )
    if broken_text:
        raise FractalError(f"{path}: the file ends inside a text that has no category")
    return rows


def load_banking77(data_dir: Path) -> DatasetSplits:
    """Banking77's official train (10,003 rows) and test (3,080 rows) splits."""
    folder = data_dir / "banking77"
    train, test = _read_split(folder / "train.csv"), _read_split(folder / "test.csv")
    built = build_hierarchy(
        "banking77", ("intent",), train + test, ["train"] * len(train) + ["test"] * len(test)
    )
    return DatasetSplits(train=built["train"], test=built["test"])
