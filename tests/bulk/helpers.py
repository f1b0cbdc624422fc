"""Helpers for the bulk tests: corpora on disk, the ``fractal`` CLI in process, shards by hand,
and what an index dir's store holds."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bulk.shards import HEADER_KEY
from training.cli import main

TEXTS = [
    "reset my online banking password",
    "what time does the pharmacy close",
    "play some jazz in the kitchen",
    "how many calories are in an apple",
    "book a table for two tonight",
    "what is the weather in paris",
    "transfer fifty dollars to savings",
    "set an alarm for seven am",
    "translate good morning into french",
    "is my flight to boston on time",
]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    """``fractal ARGV`` in process: exit status, stdout, stderr."""
    status = main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def assert_one_error(status: int, stderr: str, *fragments: str) -> None:
    """Exit status 2 and a single ``error: …`` line holding every fragment."""
    lines = stderr.strip().splitlines()
    assert status == 2, stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def stored_documents(index_dir: Path) -> dict[str, tuple[str, np.ndarray]]:
    """The store of record's documents by id: text and full vector."""
    with closing(sqlite3.connect(index_dir / "store.sqlite3")) as db:
        rows = db.execute("SELECT doc_id, text, vector FROM documents").fetchall()
    return {doc_id: (text, np.frombuffer(blob, "<f4")) for doc_id, text, blob in rows}


def write_raw_shard(path: Path, header: dict, columns: dict[str, pa.Array]) -> Path:
    """A Parquet file with these columns and ``header`` as its shard metadata, unchecked."""
    table = pa.table(columns).replace_schema_metadata({HEADER_KEY: json.dumps(header).encode()})
    pq.write_table(table, path)
    return path
