"""Reading a user's corpus: JSONL, CSV/TSV with a header, Parquet, or plain text lines.

A record is an id, a text and a metadata object; no labels are needed. Columns (keys, for JSONL):

- the **text** column (``--text-column``, default ``text``) must be there and hold non-blank text;
- the **id** column (``--id-column``): when not given, ``id`` is used if the corpus has it (in
  its header, or in the first JSONL object), else each record's row number is its id;
- the **metadata** columns (``--metadata-columns``): by default every other column.

Plain text files (``.txt``) hold one text per line; blank lines are skipped and a text's id is
its line number. Rows count from 1: the line of a JSONL or text file, the record after the header
of a CSV/TSV file, the record of a Parquet file. :func:`read_chunks` yields the corpus in order,
``size`` records at a time; every problem is a :class:`~bulk.errors.BulkError` naming the file
and row.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bulk.errors import BulkError, where

FORMATS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".tsv": "tsv",
    ".parquet": "parquet",
    ".txt": "lines",
}
DEFAULT_ID_COLUMN = "id"
PARQUET_BATCH_ROWS = 8192


@dataclass(frozen=True)
class Columns:
    """Which columns hold the id, the text and the metadata (see the module docstring)."""

    id: str | None = None
    text: str = "text"
    metadata: Sequence[str] | None = None


@dataclass
class Chunk:
    """Consecutive records of a corpus: ``start`` is the position of the first (from 0)."""

    start: int
    rows: list[int] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    metadata: list[dict] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class _Layout:
    """The columns resolved against a corpus's own column names."""

    id: str | None
    text: str
    metadata: Sequence[str] | None


def corpus_format(path: Path) -> str:
    """The format the file name says, or a :class:`BulkError` listing the known endings."""
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        known = ", ".join(FORMATS)
        raise BulkError(f"{path}: unknown corpus format {path.suffix!r}; use one of {known}")
    return kind


def _layout(path: Path, names: Sequence[str], columns: Columns, row: int | None) -> _Layout:
    """Check that the named columns exist among ``names`` and fill in the defaults."""
    place = where(path, row)
    if columns.text not in names:
        raise BulkError(f"{place}: no text column {columns.text!r} (columns: {', '.join(names)})")
    if columns.id is not None and columns.id not in names:
        raise BulkError(f"{place}: no id column {columns.id!r} (columns: {', '.join(names)})")
    id_column = columns.id or (DEFAULT_ID_COLUMN if DEFAULT_ID_COLUMN in names else None)
    if columns.metadata is not None:
        missing = [name for name in columns.metadata if name not in names]
        if missing:
            raise BulkError(f"{place}: no metadata column(s) {', '.join(map(repr, missing))}")
    return _Layout(id_column, columns.text, columns.metadata)


def _record(path: Path, row: int, values: dict, layout: _Layout) -> tuple[str, str, dict]:
    """(id, text, metadata) of one record given as a column → value mapping."""
    text = values.get(layout.text)
    if not isinstance(text, str) or not text.strip():
        raise BulkError(f"{where(path, row)}: the text is empty or not a string ({text!r})")
    if layout.id is None:
        doc_id = str(row)
    else:
        raw = values.get(layout.id)
        doc_id = str(raw) if isinstance(raw, int | str) and not isinstance(raw, bool) else ""
        if not doc_id.strip():
            raise BulkError(f"{where(path, row)}: the id is empty or not a string ({raw!r})")
    names = layout.metadata
    if names is None:
        names = [name for name in values if name not in (layout.id, layout.text)]
    return doc_id, text, {name: values[name] for name in names if name in values}


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """Numbered lines of a UTF-8 text file, without line ends."""
    with path.open(encoding="utf-8-sig", newline="") as lines:
        for row, line in enumerate(lines, 1):
            yield row, line.rstrip("\r\n")


def _jsonl(path: Path, columns: Columns) -> Iterator[tuple[int, tuple[str, str, dict]]]:
    layout: _Layout | None = None
    for row, line in _lines(path):
        if not line.strip():
            continue
        try:
            values = json.loads(line)
        except ValueError as exc:
            raise BulkError(f"{where(path, row)}: not valid JSON ({exc})") from None
        if not isinstance(values, dict):
            raise BulkError(f"{where(path, row)}: not a JSON object")
        if layout is None:
            layout = _layout(path, list(values), columns, row)
        yield row, _record(path, row, values, layout)


def _delimited(
    path: Path, columns: Columns, delimiter: str
) -> Iterator[tuple[int, tuple[str, str, dict]]]:
    csv.field_size_limit(sys.maxsize)
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle, delimiter=delimiter)
        header = next(reader, None)
        if header is None:
            return
        layout = _layout(path, header, columns, None)
        for row, fields in enumerate(reader, 1):
            if not fields:
                continue
            if len(fields) != len(header):
                raise BulkError(
                    f"{where(path, row)}: {len(fields)} fields, the header has {len(header)}"
                )
            yield row, _record(path, row, dict(zip(header, fields, strict=True)), layout)


def _json_value(value: object) -> object:
    """A Parquet cell as plain JSON (dates and other types become strings)."""
    return json.loads(json.dumps(value, default=str))


def _parquet(path: Path, columns: Columns) -> Iterator[tuple[int, tuple[str, str, dict]]]:
    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise BulkError(f"{path}: not a readable Parquet file ({exc})") from None
    layout = _layout(path, parquet.schema_arrow.names, columns, None)
    row = 0
    try:
        for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS):
            for values in batch.to_pylist():
                row += 1
                doc_id, text, metadata = _record(path, row, values, layout)
                yield row, (doc_id, text, {k: _json_value(v) for k, v in metadata.items()})
    except (pa.ArrowException, OSError) as exc:
        raise BulkError(f"{where(path, row + 1)}: not a readable Parquet file ({exc})") from None


def _text_lines(path: Path) -> Iterator[tuple[int, tuple[str, str, dict]]]:
    for row, line in _lines(path):
        if line.strip():
            yield row, (str(row), line, {})


def records(path: Path, columns: Columns) -> Iterator[tuple[int, tuple[str, str, dict]]]:
    """(row, (id, text, metadata)) for every record, in file order."""
    kind = corpus_format(path)
    if kind == "jsonl":
        return _jsonl(path, columns)
    if kind in ("csv", "tsv"):
        return _delimited(path, columns, "," if kind == "csv" else "\t")
    if kind == "parquet":
        return _parquet(path, columns)
    return _text_lines(path)


def _guarded(path: Path, rows: Iterable[tuple[int, tuple[str, str, dict]]]):
    """The records, with an unreadable file or bad UTF-8 turned into a :class:`BulkError`."""
    last = 0
    try:
        for row, record in rows:
            last = row
            yield row, record
    except UnicodeDecodeError as exc:
        raise BulkError(f"{where(path, last + 1)}: not valid UTF-8 ({exc.reason})") from None
    except (OSError, csv.Error) as exc:
        raise BulkError(f"{path}: cannot read the corpus ({exc})") from None


def read_chunks(path: Path, columns: Columns, size: int) -> Iterator[Chunk]:
    """The corpus in order, ``size`` records at a time; ids must not repeat within a chunk.

    A corpus without a single record is a :class:`BulkError`.
    """
    chunk = Chunk(start=0)
    seen: dict[str, int] = {}
    for row, (doc_id, text, metadata) in _guarded(path, records(path, columns)):
        if doc_id in seen:
            raise BulkError(
                f"{where(path, row)}: id {doc_id!r} repeats row {seen[doc_id]} of the same shard"
            )
        seen[doc_id] = row
        chunk.rows.append(row)
        chunk.ids.append(doc_id)
        chunk.texts.append(text)
        chunk.metadata.append(metadata)
        if len(chunk) == size:
            yield chunk
            chunk = Chunk(start=chunk.start + size)
            seen = {}
    if len(chunk):
        yield chunk
    elif chunk.start == 0:
        raise BulkError(f"{path}: the corpus holds no documents")
