"""The in-memory row → document id table that names a search's hits."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from index.embedded import row_names
from index.embedded.row_names import RowNames


@pytest.fixture(autouse=True, params=["native", "python"])
def naming(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each test below with hits named by the C extension and by the Python loop."""
    if request.param == "python":
        monkeypatch.setattr(row_names, "_NATIVE", None)
    elif row_names._NATIVE is None:
        pytest.skip("the naming extension is not built here")
    yield request.param


def test_the_native_call_refuses_what_it_cannot_read(naming: str) -> None:
    native = row_names._NATIVE
    if native is None:
        pytest.skip("the native call only")
    slots, ids = np.zeros(4, np.int64), np.zeros(0, np.uint8)
    rows = np.zeros((1, 2), np.int64)
    with pytest.raises(ValueError, match="values float32 or int64 of the same shape"):
        native.named(slots, ids, rows, np.zeros((1, 3), np.float32), print)
    with pytest.raises(ValueError, match="rows a 2-d int64"):
        native.named(slots, ids, rows.astype(np.int32), np.zeros((1, 2), np.float32), print)
    with pytest.raises(TypeError, match="make must be callable"):
        native.named(slots, ids, rows, np.zeros((1, 2), np.float32), None)
    slots[0] = 5 << 16 | 3  # an id past the end of the bytes
    with pytest.raises(ValueError, match="outside the ids' bytes"):
        native.named(slots, ids, rows, np.zeros((1, 2), np.float32), print)


def test_rows_are_named_and_forgotten() -> None:
    names = RowNames()
    names.add([3, 1, 2000], ["c", "a", "big row"])
    assert len(names) == 3
    assert names.names([1, 3, 2, 2000, 1, -1, 10**9]) == {1: "a", 3: "c", 2000: "big row"}
    assert names.get(2) is None and names.get(-5) is None and names.get(10**9) is None
    names.drop([3, 3, 7, -1, 10**9])  # unknown and repeated rows are ignored
    assert len(names) == 2
    assert names.names([3, 1]) == {1: "a"}
    names.add([3], ["c again"])
    assert names.get(3) == "c again" and len(names) == 3


def test_a_search_result_matrix_is_named_in_place_with_its_scores() -> None:
    names = RowNames()
    empty = np.array([[0, -1]])
    assert names.named(empty, np.zeros((1, 2), np.float32), lambda *pair: pair) == [[]]
    names.add([0, 5, 9], ["zero", "fünf", "nine"])
    names.drop([9])
    rows = np.array([[5, -1, 0, 9], [10**9, 5, 2, 0]])
    scores = np.array([[0.5, 0.25, 0.125, 1.0], [2.0, 0.75, 3.0, 0.0625]], np.float32)
    found = names.named(rows, scores, lambda name, score: (name, score))
    assert found == [[("fünf", 0.5), ("zero", 0.125)], [("fünf", 0.75), ("zero", 0.0625)]]
    assert type(found[0][0][1]) is float  # a Python number, not a numpy scalar


def test_any_string_id_round_trips() -> None:
    odd = ["ünïcødé", "emoji 🧭", "lone \udcff surrogate", "x" * 256, "with\nnewline"]
    names = RowNames()
    names.add(np.arange(len(odd)), odd)
    assert [names.get(row) for row in range(len(odd))] == odd


def test_the_buffer_is_rewritten_once_dropped_ids_outweigh_live_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(row_names, "MIN_COMPACT_BYTES", 0)
    names = RowNames()
    ids = [f"document-{i}" for i in range(1000)]
    names.add(np.arange(1000), ids)
    full = names.nbytes
    names.drop(np.arange(0, 1000, 4))  # a quarter dropped: no rewrite yet
    assert names.nbytes == full
    names.drop(np.arange(1, 1000, 4))
    names.drop(np.arange(2, 1000, 4))  # three quarters dropped: rewritten with the live ones
    assert names.nbytes < full
    assert names.names(range(1000)) == {row: ids[row] for row in range(3, 1000, 4)}
    names.add([5000], ["after the rewrite"])
    assert names.get(5000) == "after the rewrite" and names.get(7) == ids[7]


def test_a_saved_table_reads_back_as_it_was(tmp_path: Path) -> None:
    names = RowNames()
    names.add([4, 2, 9], ["four", "two", "nine"])
    names.drop([2])
    read = RowNames.read(names.save(tmp_path / "names.npz"))
    assert len(read) == 2 and read.names(range(12)) == {4: "four", 9: "nine"}
    read.add([12], ["twelve"])
    assert read.names([9, 12]) == {9: "nine", 12: "twelve"}
    empty = RowNames.read(RowNames().save(tmp_path / "empty.npz"))
    assert len(empty) == 0 and empty.names([0, 1]) == {}
    np.savez(tmp_path / "other.npz", slots=np.array([5 << 16 | 3]), ids=np.zeros(4, np.uint8))
    with pytest.raises(ValueError, match="outside the ids' bytes"):
        RowNames.read(tmp_path / "other.npz")


@pytest.mark.parametrize(
    ("rows", "doc_ids", "message"),
    [
        ([1, 2], ["a"], "2 rows and 1 ids"),
        ([1, 1], ["a", "b"], "distinct and non-negative"),
        ([-1], ["a"], "distinct and non-negative"),
        ([1], [""], "non-empty and at most 65535 bytes"),
        ([1, 2], ["a", "é" * 40_000], "non-empty and at most 65535 bytes"),
    ],
)
def test_bad_additions_are_refused(rows: list[int], doc_ids: list[str], message: str) -> None:
    names = RowNames()
    with pytest.raises(ValueError, match=message):
        names.add(rows, doc_ids)
    assert len(names) == 0
