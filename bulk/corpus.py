"""Reading a user's corpus: JSONL, CSV/TSV with a header, Parquet, or plain text lines.

A record is an id, a text and a metadata object; no labels are needed. Columns (keys, for JSONL,
checked against the first JSON object of the file):

- the **text** column (``--text-column``, default ``text``) must be there and hold non-blank text;
- the **id** column (``--id-column``): when not given, ``id`` is used if the corpus has it (in
  its header, or in the first JSONL object), else each record's number is its id (its line in a
  JSONL file, its row in a Parquet file, its record number after the header in a CSV/TSV file);
- the **metadata** columns (``--metadata-columns``): by default every other column. Each becomes
  one metadata key, except a column named ``metadata``: it holds the metadata object itself (a
  JSON object, or a string holding one, as in a ``POST /documents`` body or a ``fractal embed``
  shard), and its keys are merged with those of the other columns.

Plain text files (``.txt``) hold one text per line; blank lines are skipped and a text's id is
its line number. A record's place is its **line** in a JSONL, CSV/TSV or text file (the line it
starts on), its **row** in a Parquet file; both count from 1.

:func:`read_rows` yields every record in file order: a :class:`Record`, or a :class:`BadRow`
saying why that record alone is unusable (a line that is not valid UTF-8, not JSON or not an
object; a CSV line with the wrong number of fields; a missing or empty text or id; a metadata
column that is not an object, or whose keys repeat a column). What is wrong with the whole file
(an unknown format, a named column missing, an unreadable file) is a :class:`BulkError`.
``fractal ingest`` reports bad rows and goes on; :func:`read_chunks` (``fractal embed``) stops at
the first. Every message names the file and the line or row.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
METADATA_COLUMN = "metadata"
PARQUET_BATCH_ROWS = 8192
SHOWN_CHARS = 60


@dataclass(frozen=True)
class Columns:
    """Which columns hold the id, the text and the metadata (see the module docstring)."""

    id: str | None = None
    text: str = "text"
    metadata: Sequence[str] | None = None


@dataclass(frozen=True)
class Record:
    """A usable record: its line (or Parquet row), id, text and metadata."""

    row: int
    id: str
    text: str
    metadata: dict[str, Any]


@dataclass(frozen=True)
class BadRow:
    """A record that cannot be used, its line (or Parquet row), why, and its id when known."""

    row: int
    reason: str
    id: str | None = None


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


def row_unit(path: Path) -> str:
    """What a record's place counts: ``row`` in a Parquet file, ``line`` in the others."""
    return "row" if corpus_format(path) == "parquet" else "line"


def place(path: Path, row: int | None = None) -> str:
    """``path, line N`` (``path, row N`` for Parquet): where a message about a record points."""
    return where(path, row, row_unit(path))


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def _layout(path: Path, names: Sequence[str], columns: Columns, row: int | None) -> _Layout:
    """Check that the named columns exist among ``names`` and fill in the defaults."""
    at = place(path, row)
    if columns.text not in names:
        raise BulkError(f"{at}: no text column {columns.text!r} (columns: {', '.join(names)})")
    if columns.id is not None and columns.id not in names:
        raise BulkError(f"{at}: no id column {columns.id!r} (columns: {', '.join(names)})")
    id_column = columns.id or (DEFAULT_ID_COLUMN if DEFAULT_ID_COLUMN in names else None)
    if columns.metadata is not None:
        missing = [name for name in columns.metadata if name not in names]
        if missing:
            raise BulkError(f"{at}: no metadata column(s) {', '.join(map(repr, missing))}")
    return _Layout(id_column, columns.text, columns.metadata)


def _metadata_object(value: object) -> dict | str:
    """The ``metadata`` column's object (empty when the cell is), or why it is not one."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return f"the metadata is not a JSON object ({_shown(value)})"
    if not isinstance(value, dict):
        return f"the metadata is not a JSON object ({_shown(value)})"
    return value


def _metadata(values: dict, layout: _Layout) -> dict | str:
    """The metadata of a record given as a column → value mapping, or why it has none."""
    names = layout.metadata
    if names is None:
        names = [name for name in values if name not in (layout.id, layout.text)]
    metadata: dict[str, Any] = {}
    merged: dict = {}
    for name in names:
        if name not in values:
            continue
        if name == METADATA_COLUMN:
            found = _metadata_object(values[name])
            if isinstance(found, str):
                return found
            merged = found
        else:
            metadata[name] = values[name]
    clash = [key for key in merged if key in metadata]
    if clash:
        keys = ", ".join(map(repr, clash))
        return f"the metadata object's key(s) {keys} are also columns"
    return {**merged, **metadata}


def _record(row: int, values: dict, layout: _Layout, number: int | None = None) -> Record | BadRow:
    """The record at ``row`` given as a column → value mapping, or why it is unusable. Without
    an id column its id is ``number`` (default: ``row``)."""
    if layout.id is None:
        doc_id = str(row if number is None else number)
    else:
        raw = values.get(layout.id)
        doc_id = str(raw) if isinstance(raw, int | str) and not isinstance(raw, bool) else ""
        if not doc_id.strip():
            return BadRow(row, f"the id is missing, empty or not a string ({_shown(raw)})")
    text = values.get(layout.text)
    if not isinstance(text, str) or not text.strip():
        return BadRow(row, f"the text is missing, empty or not a string ({_shown(text)})", doc_id)
    metadata = _metadata(values, layout)
    if isinstance(metadata, str):
        return BadRow(row, metadata, doc_id)
    return Record(row, doc_id, text, metadata)


_UNDECODABLE = re.compile("[\udc80-\udcff]")
"""What ``errors="surrogateescape"`` turns a byte that is not UTF-8 into."""


def _lines(path: Path) -> Iterator[tuple[int, str | BadRow]]:
    """Numbered lines of a UTF-8 file without line ends; a line that is not UTF-8 is a bad row."""
    with path.open(encoding="utf-8-sig", errors="surrogateescape", newline="") as lines:
        for row, line in enumerate(lines, 1):
            bad = _UNDECODABLE.search(line)
            if bad is None:
                yield row, line.rstrip("\r\n")
            else:
                byte = ord(bad.group()) - 0xDC00
                yield row, BadRow(row, f"not valid UTF-8 (byte 0x{byte:02x})")


def _jsonl(path: Path, columns: Columns) -> Iterator[Record | BadRow]:
    layout: _Layout | None = None
    for row, line in _lines(path):
        if isinstance(line, BadRow):
            yield line
            continue
        if not line.strip():
            continue
        try:
            values = json.loads(line)
        except json.JSONDecodeError as exc:
            yield BadRow(row, f"not valid JSON ({exc.msg} at column {exc.colno})")
            continue
        except RecursionError:
            yield BadRow(row, "not valid JSON here (nested too deeply)")
            continue
        if not isinstance(values, dict):
            yield BadRow(row, "not a JSON object")
            continue
        if layout is None:
            layout = _layout(path, list(values), columns, row)
        yield _record(row, values, layout)


def _delimited(path: Path, columns: Columns, delimiter: str) -> Iterator[Record | BadRow]:
    csv.field_size_limit(sys.maxsize)
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle, delimiter=delimiter)
        header = next(reader, None)
        if header is None:
            return
        layout = _layout(path, header, columns, None)
        last_line = reader.line_num
        for number, fields in enumerate(reader, 1):
            row, last_line = last_line + 1, reader.line_num  # a quoted field may span lines
            if not fields:
                continue
            if len(fields) != len(header):
                yield BadRow(row, f"{len(fields)} fields, the header has {len(header)}")
                continue
            yield _record(row, dict(zip(header, fields, strict=True)), layout, number)


def _json_value(value: object) -> object:
    """A Parquet cell as plain JSON (dates and other types become strings)."""
    return json.loads(json.dumps(value, default=str))


def _parquet(path: Path, columns: Columns) -> Iterator[Record | BadRow]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ModuleNotFoundError:
        raise BulkError(
            f"{path}: reading Parquet needs pyarrow: pip install 'fractal[bulk]'"
        ) from None
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
                record = _record(row, values, layout)
                if isinstance(record, Record):
                    metadata = {key: _json_value(value) for key, value in record.metadata.items()}
                    record = Record(row, record.id, record.text, metadata)
                yield record
    except (pa.ArrowException, OSError) as exc:
        raise BulkError(f"{where(path, row + 1)}: not a readable Parquet file ({exc})") from None


def _text_lines(path: Path) -> Iterator[Record | BadRow]:
    for row, line in _lines(path):
        if isinstance(line, BadRow):
            yield line
        elif line.strip():
            yield Record(row, str(row), line, {})


def _records(path: Path, columns: Columns) -> Iterator[Record | BadRow]:
    kind = corpus_format(path)
    if kind == "jsonl":
        return _jsonl(path, columns)
    if kind in ("csv", "tsv"):
        return _delimited(path, columns, "," if kind == "csv" else "\t")
    if kind == "parquet":
        return _parquet(path, columns)
    return _text_lines(path)


def read_rows(path: Path, columns: Columns) -> Iterator[Record | BadRow]:
    """Every record of the corpus in file order, good or bad (see the module docstring); an
    unreadable file or bad UTF-8 in a CSV/TSV file is a :class:`BulkError`."""
    last = 0
    try:
        for item in _records(path, columns):
            last = item.row
            yield item
    except UnicodeDecodeError as exc:
        raise BulkError(f"{place(path, last + 1)}: not valid UTF-8 ({exc.reason})") from None
    except (OSError, csv.Error) as exc:
        raise BulkError(f"{path}: cannot read the corpus ({exc})") from None


def read_chunks(path: Path, columns: Columns, size: int) -> Iterator[Chunk]:
    """The corpus in order, ``size`` records at a time; ids must not repeat within a chunk.

    The first bad row, and a corpus without a single record, are a :class:`BulkError`.
    """
    chunk = Chunk(start=0)
    seen: dict[str, int] = {}
    unit = row_unit(path)
    for item in read_rows(path, columns):
        if isinstance(item, BadRow):
            raise BulkError(f"{place(path, item.row)}: {item.reason}")
        if item.id in seen:
            raise BulkError(
                f"{place(path, item.row)}: id {item.id!r} repeats {unit} {seen[item.id]} "
                "of the same shard"
            )
        seen[item.id] = item.row
        chunk.rows.append(item.row)
        chunk.ids.append(item.id)
        chunk.texts.append(item.text)
        chunk.metadata.append(item.metadata)
        if len(chunk) == size:
            yield chunk
            chunk = Chunk(start=chunk.start + size)
            seen = {}
    if len(chunk):
        yield chunk
    elif chunk.start == 0:
        raise BulkError(f"{path}: the corpus holds no documents")
