"""Reading a corpus: every format, the column options, and bad input naming file and row."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bulk import BulkError
from bulk.corpus import BadRow, Columns, Record, read_chunks, read_rows
from tests.bulk.helpers import TEXTS, write_jsonl


def _read(path: Path, columns: Columns | None = None, size: int = 100) -> list:
    return list(read_chunks(path, columns or Columns(), size))


def _records(path: Path, columns: Columns | None = None) -> list[tuple[str, str, dict]]:
    (chunk,) = _read(path, columns)
    return list(zip(chunk.ids, chunk.texts, chunk.metadata, strict=True))


EXPECTED = [("a", TEXTS[0], {"lang": "en"}), ("b", TEXTS[1], {"lang": "fr"})]


def test_jsonl(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "c.jsonl",
        [{"id": "a", "text": TEXTS[0], "lang": "en"}, {"id": "b", "text": TEXTS[1], "lang": "fr"}],
    )
    assert _records(path) == EXPECTED


@pytest.mark.parametrize(("name", "delimiter"), [("c.csv", ","), ("c.tsv", "\t")])
def test_csv_and_tsv_with_a_header(tmp_path: Path, name: str, delimiter: str) -> None:
    path = tmp_path / name
    lines = ["id", "text", "lang"], ["a", TEXTS[0], "en"], ["b", TEXTS[1], "fr"]
    path.write_text("".join(delimiter.join(line) + "\n" for line in lines), encoding="utf-8")
    assert _records(path) == EXPECTED


def test_parquet(tmp_path: Path) -> None:
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "text": TEXTS[:2], "lang": ["en", "fr"]}), path)
    assert _records(path) == EXPECTED


def test_plain_lines_get_their_line_numbers_as_ids(tmp_path: Path) -> None:
    path = tmp_path / "c.txt"
    path.write_text(f"{TEXTS[0]}\n\n{TEXTS[1]}\n", encoding="utf-8")
    assert _records(path) == [("1", TEXTS[0], {}), ("3", TEXTS[1], {})]


def test_column_options_and_row_number_ids(tmp_path: Path) -> None:
    rows = [{"key": 7, "body": TEXTS[0], "lang": "en", "n": 1}]
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    columns = Columns(id="key", text="body", metadata=["n"])
    assert _records(path, columns) == [("7", TEXTS[0], {"n": 1})]
    no_ids = write_jsonl(tmp_path / "d.jsonl", [{"body": TEXTS[0]}, {"body": TEXTS[1]}])
    assert [r[0] for r in _records(no_ids, Columns(text="body"))] == ["1", "2"]


def test_chunks_keep_corpus_order(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "c.jsonl", [{"text": text} for text in TEXTS])
    chunks = _read(path, size=4)
    assert [(chunk.start, len(chunk)) for chunk in chunks] == [(0, 4), (4, 4), (8, 2)]
    assert [text for chunk in chunks for text in chunk.texts] == TEXTS


def _write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


BAD_CORPORA = [
    ("empty.jsonl", "\n\n", "holds no documents"),
    ("empty.csv", "id,text\n", "holds no documents"),
    ("header.csv", "id,body\na,hello\n", "no text column 'text' (columns: id, body)"),
    ("rows.jsonl", '{"text": "a"}\n{"text": "b"\n', "line 2: not valid JSON"),
    ("list.jsonl", '{"text": "a"}\n[1, 2]\n', "line 2: not a JSON object"),
    ("blank.jsonl", '{"text": "a"}\n{"text": "  "}\n', "line 2: the text is missing, empty"),
    ("fields.csv", "id,text\na,hello\nb,hello,extra\n", "line 3: 3 fields, the header has 2"),
    ("bytes.txt", b"hello\n\xff\xfe oops\n", "not valid UTF-8"),
    (
        "twice.jsonl",
        '{"id": "x", "text": "a"}\n{"id": "x", "text": "b"}\n',
        "line 2: id 'x' repeats line 1",
    ),
    ("corpus.xml", "<a/>", "unknown corpus format '.xml'"),
    ("table.parquet", b"PAR1 not really", "not a readable Parquet file"),
]


@pytest.mark.parametrize(("name", "content", "message"), BAD_CORPORA)
def test_bad_corpora_name_the_file_and_row(
    tmp_path: Path, name: str, content: str | bytes, message: str
) -> None:
    path = _write(tmp_path / name, content)
    with pytest.raises(BulkError) as raised:
        _read(path)
    assert str(raised.value).startswith(str(path))
    assert message in str(raised.value)


def test_read_rows_reports_each_bad_row_and_goes_on(tmp_path: Path) -> None:
    lines = [
        '{"id": "a", "text": "hello"}',
        '{"id": "b", "text": ',
        "",
        '["not", "an", "object"]',
        '{"id": "", "text": "no id"}',
        '{"id": "c", "text": "   "}',
        '{"id": "d", "text": "bad metadata", "metadata": [1, 2]}',
        '{"id": "e", "text": "clash", "metadata": {"lang": "en"}, "lang": "fr"}',
        '{"id": "f", "text": "merged", "metadata": {"lang": "en"}, "n": 1}',
    ]
    path = _write(tmp_path / "c.jsonl", "\n".join(lines) + "\n")
    items = list(read_rows(path, Columns()))
    assert [type(item) for item in items] == [Record] + [BadRow] * 6 + [Record]
    assert [item.row for item in items] == [1, 2, 4, 5, 6, 7, 8, 9]
    reasons = [item.reason for item in items if isinstance(item, BadRow)]
    assert reasons[0].startswith("not valid JSON")
    assert reasons[1:] == [
        "not a JSON object",
        "the id is missing, empty or not a string ('')",
        "the text is missing, empty or not a string ('   ')",
        "the metadata is not a JSON object ([1, 2])",
        "the metadata object's key(s) 'lang' are also columns",
    ]
    assert items[-1] == Record(9, "f", "merged", {"lang": "en", "n": 1})


def test_csv_rows_are_numbered_by_the_line_they_start_on(tmp_path: Path) -> None:
    content = 'key,body,metadata\na,"two\nlines",\nb,x,"{""lang"": ""en""}"\nc,y,not json\n'
    path = _write(tmp_path / "c.csv", content)
    items = list(read_rows(path, Columns(id="key", text="body")))
    assert items[:2] == [Record(2, "a", "two\nlines", {}), Record(4, "b", "x", {"lang": "en"})]
    assert items[2] == BadRow(5, "the metadata is not a JSON object ('not json')", "c")
    # Without an id column, a record's id is its number after the header, not its line.
    assert [(item.row, item.id) for item in read_rows(path, Columns(text="body"))] == [
        (2, "1"),
        (4, "2"),
        (5, "3"),
    ]


def test_a_line_that_is_not_utf8_is_one_bad_row(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.jsonl", b'{"text": "a"}\n\xff\n{"text": "b"}\n')
    items = list(read_rows(path, Columns()))
    assert [type(item) for item in items] == [Record, BadRow, Record]
    assert items[1].reason == "not valid UTF-8 (byte 0xff)"


def test_a_missing_corpus_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(BulkError, match="cannot read the corpus"):
        _read(tmp_path / "missing.jsonl")


def test_bulk_never_imports_torch_or_fastapi() -> None:
    code = (
        "import sys, bulk.corpus, bulk.shards, bulk.embed, bulk.importer, bulk.ingest; "
        "print(sorted(m for m in ('torch', 'fastapi', 'training') if m in sys.modules))"
    )
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert output.strip() == "[]"
