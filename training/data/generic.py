"""A user's own labelled texts: CSV, TSV, JSONL or plain text lines, as a label hierarchy.

File formats come from the extension (``.csv``, ``.tsv``, ``.jsonl``, ``.txt``) unless
``file_format`` names one. CSV and TSV files start with a header row naming the columns; a JSONL
file holds one JSON object per line; a plain text file holds one ``LABEL text`` per line.
Blank lines are skipped everywhere.

Three ways to give the labels, coarse level first:

* one label column (``label_column``) holding the whole path split by a delimiter, e.g.
  ``LOC:city`` or ``banking/transfer``;
* one column per level (``level_columns``), e.g. ``("domain", "intent")``;
* in a plain text file, the first whitespace-separated token of each line, split like a label
  column (TREC style: ``LOC:city What is the capital of Peru?``).

Delimiter rule (``label_delimiter="auto"``): among ``:`` ``/`` ``>`` ``|``, the one that occurs in
the most distinct labels, ties going to the earlier one in that list; if none occurs, the labels
are flat (one level). ``label_delimiter=None`` never splits; any other string is used as given.
Label parts are stripped of surrounding whitespace; texts are kept as written. A label is
identified by its path from the root, so ``LOC:other`` and ``NUM:other`` are two labels (shown
as ``LOC / other`` and ``NUM / other``).

Files are read in ``encoding`` (default UTF-8, whose byte-order mark is dropped); a byte that
does not decode is an error naming it and its offset in the file.

A single file is split into train and test by a seeded, stratified draw: each finest label gives
``test_fraction × its rows`` (rounded half up) rows to the test split, always keeping one for
training. A folder holding ``train.<ext>`` and ``test.<ext>``, or a file with ``test_path``, is
used as given.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from training.data.dataset import DatasetSplits, build_hierarchy
from training.errors import FractalError

FILE_FORMATS = ("csv", "tsv", "jsonl", "txt")
AUTO_DELIMITER = "auto"
DELIMITER_CANDIDATES = (":", "/", ">", "|")
DEFAULT_ENCODING = "utf-8"


@dataclass(frozen=True)
class _Row:
    """One labelled row as read: where it came from, its text and its raw label value(s)."""

    path: Path
    line: int
    text: str
    labels: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def detect_label_delimiter(labels: Sequence[str]) -> str | None:
    """The delimiter of :data:`DELIMITER_CANDIDATES` found in the most distinct labels, or None."""
    distinct = set(labels)
    counts = {mark: sum(mark in label for label in distinct) for mark in DELIMITER_CANDIDATES}
    best = max(DELIMITER_CANDIDATES, key=lambda mark: counts[mark])
    return best if counts[best] else None


def _file_format(path: Path, file_format: str | None) -> str:
    if file_format is not None:
        if file_format not in FILE_FORMATS:
            raise FractalError(
                f"unknown file format {file_format!r}: choose one of {', '.join(FILE_FORMATS)}"
            )
        return file_format
    extension = path.suffix.lower().lstrip(".")
    if extension not in FILE_FORMATS:
        raise FractalError(
            f"cannot tell the format of {path} from its extension: name the file "
            f"*.{', *.'.join(FILE_FORMATS)} or give file_format"
        )
    return extension


def _codec_name(encoding: str) -> str:
    try:
        return codecs.lookup(encoding).name
    except LookupError:
        raise FractalError(
            f"unknown encoding {encoding!r}: give a Python codec name such as utf-8, latin-1 or "
            "cp1252"
        ) from None


def _read_text(path: Path, encoding: str) -> str:
    """The file decoded from ``encoding``, without a leading UTF-8 byte-order mark."""
    data = path.read_bytes()
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise FractalError(
            f"{path}: byte 0x{data[exc.start]:02x} at offset {exc.start} is not valid {encoding}; "
            "pass --encoding (e.g. --encoding latin-1)"
        ) from exc
    return text.removeprefix("\ufeff") if _codec_name(encoding) == "utf-8" else text


def _numbered_lines(path: Path, encoding: str) -> list[tuple[int, str]]:
    """The non-blank lines of a file with their 1-based numbers (split on newlines only)."""
    lines = _read_text(path, encoding).split("\n")
    return [(n, line.rstrip("\r")) for n, line in enumerate(lines, start=1) if line.strip()]


def _read_table(
    path: Path, separator: str, columns: Sequence[str], encoding: str
) -> list[_Row]:
    """Rows of a CSV/TSV file with a header; ``columns`` = text column, then label column(s)."""
    reader = csv.reader(io.StringIO(_read_text(path, encoding), newline=""), delimiter=separator)
    rows: list[_Row] = []
    try:
        header = next(reader, None)
        if not header:
            raise FractalError(f"{path} is empty: expected a header row naming its columns")
        missing = [column for column in columns if column not in header]
        if missing:
            raise FractalError(
                f"{path}: no column {', '.join(repr(c) for c in missing)}; "
                f"columns found: {', '.join(header)}"
            )
        positions = [header.index(column) for column in columns]
        for values in reader:
            if not values:
                continue
            if len(values) != len(header):
                raise FractalError(
                    f"{path}:{reader.line_num}: malformed row: {len(values)} field(s), "
                    f"the header has {len(header)}"
                )
            picked = [values[i] for i in positions]
            rows.append(_Row(path, reader.line_num, picked[0], tuple(picked[1:])))
    except csv.Error as exc:
        raise FractalError(f"{path}:{reader.line_num}: malformed row: {exc}") from exc
    return rows


def _json_string(value: object, field: str, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise FractalError(f"{where}: field {field!r} must be a string, got {type(value).__name__}")


def _read_jsonl(path: Path, fields: Sequence[str], encoding: str) -> list[_Row]:
    """Rows of a JSONL file; ``fields`` = text field, then label field(s)."""
    rows: list[_Row] = []
    for line, content in _numbered_lines(path, encoding):
        where = f"{path}:{line}"
        try:
            record = json.loads(content)
        except json.JSONDecodeError as exc:
            raise FractalError(f"{where}: not a valid JSON line: {exc.msg}") from exc
        if not isinstance(record, dict):
            raise FractalError(f"{where}: expected a JSON object, got {type(record).__name__}")
        missing = [field for field in fields if field not in record]
        if missing:
            raise FractalError(
                f"{where}: no field {', '.join(repr(f) for f in missing)}; "
                f"fields found: {', '.join(record)}"
            )
        values = [_json_string(record[field], field, where) for field in fields]
        rows.append(_Row(path, line, values[0], tuple(values[1:])))
    return rows


def _read_text_lines(path: Path, encoding: str) -> list[_Row]:
    """Rows of a plain text file of ``LABEL text`` lines."""
    rows: list[_Row] = []
    for line, content in _numbered_lines(path, encoding):
        parts = content.split(maxsplit=1)
        if len(parts) != 2:
            raise FractalError(
                f"{path}:{line}: malformed line: expected 'LABEL text', found only {parts[0]!r}"
            )
        rows.append(_Row(path, line, parts[1].strip(), (parts[0],)))
    return rows


def _read_rows(
    path: Path,
    file_format: str,
    text_column: str,
    label_columns: Sequence[str],
    encoding: str,
) -> list[_Row]:
    columns = (text_column, *label_columns)
    if file_format == "csv":
        rows = _read_table(path, ",", columns, encoding)
    elif file_format == "tsv":
        rows = _read_table(path, "\t", columns, encoding)
    elif file_format == "jsonl":
        rows = _read_jsonl(path, columns, encoding)
    else:
        rows = _read_text_lines(path, encoding)
    if not rows:
        raise FractalError(f"{path} holds no labelled rows")
    for row in rows:
        if not row.text.strip():
            raise FractalError(f"{row.where}: empty text")
    return rows


def _label_paths(
    rows: Sequence[_Row], delimiter: str | None, level_names: Sequence[str] | None
) -> list[tuple[str, ...]]:
    """Each row's label path, coarse first, split on ``delimiter`` when it has one label value.

    Every path must have as many levels as ``level_names`` (or, without them, as the first row),
    none of them empty.
    """
    if level_names is not None:
        depth: int | None = len(level_names)
        expected = f"one per level name: {', '.join(level_names)}"
    else:
        depth, expected = None, f"as on line {rows[0].line} of {rows[0].path.name}"
    paths: list[tuple[str, ...]] = []
    for row in rows:
        if len(row.labels) == 1 and delimiter:
            path = tuple(part.strip() for part in row.labels[0].split(delimiter))
        else:
            path = tuple(label.strip() for label in row.labels)
        depth = len(path) if depth is None else depth
        if len(path) != depth:
            split_note = f" split on {delimiter!r}" if delimiter else ""
            raise FractalError(
                f"{row.where}: label {row.labels[0]!r}{split_note} has {len(path)} level(s), "
                f"expected {depth} ({expected})"
            )
        if not all(path):
            raise FractalError(f"{row.where}: label {' / '.join(row.labels)!r} has an empty level")
        paths.append(path)
    return paths


def _stratified_split(
    paths: Sequence[tuple[str, ...]], test_fraction: float, seed: int, source: Path
) -> list[str]:
    members: dict[tuple[str, ...], list[int]] = {}
    for i, path in enumerate(paths):
        members.setdefault(path, []).append(i)
    rng = np.random.default_rng(seed)
    splits = ["train"] * len(paths)
    for path in sorted(members):
        rows = members[path]
        test_count = min(len(rows) - 1, int(len(rows) * test_fraction + 0.5))
        for i in rng.permutation(rows)[:test_count]:
            splits[i] = "test"
    if "test" not in splits:
        raise FractalError(
            f"{source}: no label has enough rows to hold out test_fraction={test_fraction} of "
            "them; add rows, raise test_fraction, or give a separate test file"
        )
    return splits


def _split_files(folder: Path) -> tuple[Path, Path]:
    """The ``train.<ext>`` and ``test.<ext>`` files of a folder."""
    found: dict[str, list[Path]] = {"train": [], "test": []}
    for entry in sorted(folder.iterdir()):
        if entry.is_file() and entry.stem in found and entry.suffix.lstrip(".") in FILE_FORMATS:
            found[entry.stem].append(entry)
    if len(found["train"]) != 1 or len(found["test"]) != 1:
        present = ", ".join(entry.name for entry in sorted(folder.iterdir())) or "nothing"
        raise FractalError(
            f"{folder} must hold exactly one train.<ext> and one test.<ext> file "
            f"(ext: {', '.join(FILE_FORMATS)}); found: {present}"
        )
    return found["train"][0], found["test"][0]


def _input_files(path: Path, test_path: Path | None) -> tuple[Path, ...]:
    """The train file and, when the split is given, the test file."""
    if path.is_dir():
        if test_path is not None:
            raise FractalError(f"{path} is a folder; test_path only goes with a single train file")
        files: tuple[Path, ...] = _split_files(path)
    else:
        files = (path,) if test_path is None else (path, test_path)
    for file in files:
        if not file.is_file():
            raise FractalError(f"file not found: {file}")
    return files


def _label_columns(
    label_column: str, level_columns: Sequence[str] | None, level_names: Sequence[str] | None
) -> tuple[str, ...]:
    if level_columns is None:
        return (label_column,)
    if not level_columns:
        raise FractalError("level_columns must name at least one column")
    if level_names is not None and len(level_names) != len(level_columns):
        raise FractalError(
            f"{len(level_names)} level name(s) for {len(level_columns)} level column(s)"
        )
    return tuple(level_columns)


def load_labelled_files(
    path: Path,
    *,
    test_path: Path | None = None,
    file_format: str | None = None,
    text_column: str = "text",
    label_column: str = "label",
    level_columns: Sequence[str] | None = None,
    label_delimiter: str | None = AUTO_DELIMITER,
    level_names: Sequence[str] | None = None,
    test_fraction: float = 0.2,
    seed: int = 42,
    name: str | None = None,
    encoding: str = DEFAULT_ENCODING,
) -> DatasetSplits:
    """Load labelled texts from ``path`` (a file, or a folder of ``train.*`` and ``test.*``).

    ``level_columns`` (CSV/TSV/JSONL) gives one column per level and replaces ``label_column``.
    ``level_names`` default to ``level0``, ``level1``, …; when given, they also fix the number
    of levels every label must have. ``test_fraction`` and ``seed`` only apply to a single file.
    ``name`` defaults to the file's stem or the folder's name. ``encoding`` is any Python codec
    name (``latin-1``, ``cp1252`` …). See the module docstring for formats, the delimiter rule,
    label paths and the split.
    """
    _codec_name(encoding)
    files = _input_files(path, test_path)
    if len(files) == 1 and not 0.0 < test_fraction < 1.0:
        raise FractalError(f"test_fraction must lie strictly between 0 and 1, got {test_fraction}")
    label_columns = _label_columns(label_column, level_columns, level_names)

    rows: list[_Row] = []
    splits: list[str] = []
    for file, split in zip(files, ("train", "test")[: len(files)], strict=True):
        file_format_used = _file_format(file, file_format)
        if file_format_used == "txt" and level_columns is not None:
            raise FractalError(
                f"{file}: a plain text file has one label token per line; "
                "level_columns applies to CSV, TSV and JSONL files"
            )
        file_rows = _read_rows(file, file_format_used, text_column, label_columns, encoding)
        rows.extend(file_rows)
        splits.extend([split] * len(file_rows))

    if level_columns is not None:
        label_delimiter = None
    elif label_delimiter == AUTO_DELIMITER:
        label_delimiter = detect_label_delimiter([row.labels[0] for row in rows])
    paths = _label_paths(rows, label_delimiter, level_names)
    if level_names is None:
        level_names = tuple(f"level{i}" for i in range(len(paths[0])))
    if len(files) == 1:
        splits = _stratified_split(paths, test_fraction, seed, files[0])
    texts_and_paths = [(row.text, label_path) for row, label_path in zip(rows, paths, strict=True)]
    built = build_hierarchy(
        name or (path.name if path.is_dir() else path.stem), level_names, texts_and_paths, splits
    )
    return DatasetSplits(train=built["train"], test=built["test"])
