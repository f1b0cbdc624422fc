"""The SQLite store of record: rows, replacement, deletion, the change log, reopening."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from index.embedded.store import Store
from index.types import Contents, Document


def doc(
    doc_id: str, value: float, text: str = "", dim: int = 4, metadata: dict | None = None
) -> Document:
    return Document(
        doc_id, text or f"text of {doc_id}", np.full(dim, value, np.float32), metadata or {}
    )


def test_upsert_gives_new_rows_and_replacing_moves_a_document_to_a_new_row(tmp_path: Path) -> None:
    store = Store(tmp_path / "store.sqlite3", 4)
    first = store.upsert([doc("a", 1.0), doc("b", 2.0)])
    assert first.replaced == (None, None)
    assert first.counter == 2 and store.counter == 2
    second = store.upsert([Document("a", "new text", np.arange(4, dtype=np.float32), {"k": [1]})])
    assert second.replaced == (first.rows[0],)
    assert second.rows[0] > max(first.rows)
    assert second.counter == 4  # one removal and one addition
    stored = store.get("a")
    assert stored is not None
    assert stored.text == "new text" and stored.metadata == {"k": [1]}
    np.testing.assert_array_equal(stored.vector, np.arange(4))
    live = store.live_row_ids()
    assert store.doc_ids_of(live) == ["b", "a"] and store.count() == 2
    store.close()


def test_delete_removes_known_ids_and_ignores_unknown_ones(tmp_path: Path) -> None:
    store = Store(tmp_path / "store.sqlite3", 4)
    rows = store.upsert([doc("a", 1.0), doc("b", 2.0)]).rows
    deleted = store.delete(["a", "missing"])
    assert deleted.removed == (rows[0],) and deleted.counter == 3
    assert store.get("a") is None and store.get("b") is not None
    assert store.live_row_ids().tolist() == [rows[1]] and store.count() == 1
    assert store.doc_ids_of([rows[0], rows[1]]) == ["a", "b"]  # removal still in the log
    store.prune_changes(deleted.counter)
    assert store.doc_ids_of([rows[0], rows[1]]) == [None, "b"]
    np.testing.assert_array_equal(store.vectors_of(np.array([rows[1]])), np.full((1, 4), 2.0))
    ((chunk_rows, chunk_vectors),) = list(store.iter_vectors(chunk=10))
    assert chunk_rows.tolist() == [rows[1]]
    np.testing.assert_array_equal(chunk_vectors, np.full((1, 4), 2.0))
    store.close()


def test_contents_of_keeps_the_order_and_gives_none_for_unknown_ids(tmp_path: Path) -> None:
    store = Store(tmp_path / "store.sqlite3", 4)
    store.upsert([doc("a", 1.0), doc("b", 2.0, metadata={"n": 2}), doc("c", 3.0)])
    store.delete(["c"])
    found = store.contents_of(["b", "missing", "a", "c", "b"])
    assert [d and d.id for d in found] == ["b", None, "a", None, "b"]
    assert found[0] is not None and found[0].metadata == {"n": 2}
    stored_a = store.get("a")
    assert found[2] == Contents("a", stored_a.text, stored_a.metadata)
    assert store.contents_of([]) == []
    store.close()


@pytest.mark.parametrize(
    "metadata",
    [
        {"nested": {"list": [1, 2.5, None, True]}, "text": "naïve ☕"},
        {"not_a_number": float("nan"), "big": 2**70, "inf": float("-inf")},  # beyond orjson
    ],
)
def test_metadata_reads_back_as_the_standard_parser_reads_it(
    tmp_path: Path, metadata: dict
) -> None:
    """Metadata is written by the standard JSON writer and read back by orjson, or by the
    standard parser where orjson refuses what it wrote."""
    store = Store(tmp_path / "store.sqlite3", 4)
    (row,) = store.upsert([doc("a", 1.0, metadata=metadata)]).rows
    expected = json.loads(json.dumps(metadata))
    got = [store.get("a").metadata, store.contents_of(["a"])[0].metadata]
    got.append(store.named([row], contents=True)[0][1].metadata)
    for value in got:
        assert json.dumps(value) == json.dumps(expected)  # NaN != NaN: compare the texts
    store.close()


def test_named_gives_each_row_in_the_order_asked_and_removed_rows_their_id(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "store.sqlite3", 4)
    a, b = store.upsert([doc("a", 1.0), doc("b", 2.0)]).rows
    store.delete(["a"])
    assert store.named([b, a, 999, b]) == [("b", None), ("a", None), (None, None), ("b", None)]
    named = store.named([a, b], contents=True)
    assert named[0] == ("a", None)  # removed: its id from the log, no contents
    assert named[1][0] == "b" and named[1][1] == Contents("b", "text of b", {})
    assert store.names([]) == {}
    store.close()


def test_present_names_the_stored_ids_among_those_asked(tmp_path: Path) -> None:
    store = Store(tmp_path / "store.sqlite3", 4)
    store.upsert([doc("a", 1.0), doc("b", 2.0), doc("c", 3.0)])
    store.delete(["c"])
    assert store.present(["b", "missing", "a", "c", "b"]) == {"a", "b"}
    assert store.present([]) == set()
    store.close()


def test_changes_since_gives_the_net_change_after_a_counter(tmp_path: Path) -> None:
    store = Store(tmp_path / "store.sqlite3", 4)
    a, b, c = store.upsert([doc("a", 1.0), doc("b", 2.0), doc("c", 3.0)]).rows
    mark = store.counter
    new_a = store.upsert([doc("a", 5.0)]).rows[0]
    store.delete(["b"])
    temporary = store.upsert([doc("t", 1.0)]).rows[0]
    store.delete(["t"])
    changes = store.changes_since(mark)
    assert changes.added == (new_a,)
    assert sorted(changes.removed) == [a, b]
    assert temporary not in changes.added + changes.removed
    assert changes.counter == store.counter
    assert store.changes_since(store.counter).added == ()
    assert set(store.changes_since(0).added) == {c, new_a}


def test_pruned_changes_cannot_be_replayed(tmp_path: Path) -> None:
    store = Store(tmp_path / "store.sqlite3", 4)
    store.upsert([doc("a", 1.0), doc("b", 2.0)])
    store.prune_changes(2)
    assert store.pruned_through == 2
    store.upsert([doc("c", 1.0)])
    assert len(store.changes_since(2).added) == 1
    with pytest.raises(ValueError, match="no longer logged"):
        store.changes_since(1)


def test_writes_survive_reopening_and_the_file_is_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    store = Store(path, 4)
    store.upsert([doc("a", 1.0)])
    store_id = store.store_id
    store.close()
    reopened = Store(path, 4)
    assert reopened.store_id == store_id and reopened.counter == 1
    assert reopened.get("a") is not None
    reopened.close()
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_reopening_with_another_dim_is_refused(tmp_path: Path) -> None:
    Store(tmp_path / "store.sqlite3", 4).close()
    with pytest.raises(ValueError, match="holds 4-d vectors, not 8-d"):
        Store(tmp_path / "store.sqlite3", 8)


def test_a_failed_write_commits_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "store.sqlite3", 4)
    with pytest.raises(ValueError, match=r"vector must have shape \(4,\)"):
        store.upsert([doc("a", 1.0), doc("b", 1.0, dim=3)])
    assert store.get("a") is None and store.counter == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"id": ""}, "non-empty strings"),
        ({"id": 7}, "non-empty strings"),
        ({"text": None}, "text must be a string"),
        ({"metadata": ["x"]}, "metadata must be a JSON object"),
        ({"metadata": {"x": object()}}, "not JSON-serialisable"),
        ({"id": "a\ud800"}, "id is not valid Unicode"),
        ({"text": "lone \udc00 surrogate"}, "text is not valid Unicode"),
        ({"metadata": {"k": ["\ud800"]}}, "metadata is not valid Unicode"),
        ({"metadata": {"\ud800": 1}}, "metadata is not valid Unicode"),
    ],
)
def test_documents_check_their_fields(kwargs: dict, message: str) -> None:
    fields = {"id": "a", "text": "t", "vector": np.zeros(4, np.float32), **kwargs}
    with pytest.raises(ValueError, match=message):
        Document(**fields)
