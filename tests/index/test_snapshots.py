"""Durability and recovery: reopening without a snapshot, catching up, rebuilding bad snapshots."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from index import Collection, HnswParams, PqParams
from index.embedded.store import Store

KINDS = ("exact", "hnsw", "pq")
UNQUANTISED = ("exact", "hnsw")
PQ = PqParams(m=4, nbits=4, min_train=100)


def open_collection(path: Path, hnsw: HnswParams | None = None) -> Collection:
    return Collection(path, 32, (8, 32), KINDS, hnsw=hnsw, pq=PQ, fragment_dim=4)


def add(collection: Collection, rng: np.random.Generator, names: list[str]) -> np.ndarray:
    vectors = rng.standard_normal((len(names), 32)).astype(np.float32)
    collection.upsert(names, [f"text of {name}" for name in names], vectors)
    return vectors


def results(
    collection: Collection, queries: np.ndarray, kinds: tuple[str, ...] = KINDS
) -> dict[str, list[list[str]]]:
    """The top-5 ids for the queries from every index of these kinds, by index name.

    A rebuilt PQ index has codebooks trained afresh, on the documents present at that time, so
    only a PQ index loaded from a snapshot is expected to answer exactly as before.
    """
    found = {}
    for name in collection.stats().indexes:
        scoring, dim, kind = name.split("-")
        if kind not in kinds:
            continue
        hits = collection.search(queries, 5, int(dim), kind, scoring).hits
        found[name] = [[hit.id for hit in row] for row in hits]
    return found


def test_documents_and_search_survive_reopening_without_a_snapshot(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    collection = open_collection(tmp_path)
    vectors = add(collection, rng, [f"d{i}" for i in range(200)])
    collection.delete(["d5"])
    before = results(collection, vectors[:4], UNQUANTISED)
    collection.close()

    reopened = open_collection(tmp_path)
    assert reopened.get("d5") is None
    stored = reopened.get("d7")
    assert stored is not None and stored.text == "text of d7"
    np.testing.assert_array_equal(stored.vector, vectors[7])
    assert results(reopened, vectors[:4], UNQUANTISED) == before
    recovery = reopened.stats().recovery
    assert recovery["loaded"] == [] and set(recovery["rebuilt"].values()) == {"no snapshot"}
    assert reopened.stats().change_counter == 201


def test_reopening_after_a_snapshot_catches_up_with_later_writes(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    collection = open_collection(tmp_path)
    vectors = add(collection, rng, [f"d{i}" for i in range(200)])
    assert collection.snapshot() == 200
    later = add(collection, rng, ["d0", "new-1", "new-2"])  # d0 replaced: 1 removal + 3 adds
    collection.delete(["d1", "new-2"])
    queries = np.concatenate([later, vectors[:3]])
    before = results(collection, queries)
    collection.close()

    reopened = open_collection(tmp_path)
    recovery = reopened.stats().recovery
    assert recovery["snapshot_counter"] == 200
    assert len(recovery["loaded"]) == 12 and recovery["rebuilt"] == {}
    assert recovery["caught_up_changes"] == 4  # net: add d0', new-1; remove d0, d1
    assert results(reopened, queries) == before
    assert reopened.search(later[1], 1, 32).hits[0][0].id == "new-1"
    assert reopened.get("d1") is None and reopened.get("new-2") is None
    assert reopened.stats().indexes["cosine-32-pq"]["trained"]
    assert reopened.stats().indexes["cosine-32-hnsw"]["deleted"] == 2
    assert reopened.stats().documents == 200


def test_a_corrupt_snapshot_file_is_rebuilt_from_the_store(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    collection = open_collection(tmp_path)
    vectors = add(collection, rng, [f"d{i}" for i in range(150)])
    collection.snapshot()
    before = results(collection, vectors[:3], UNQUANTISED)
    collection.close()
    manifest = json.loads((tmp_path / "snapshot" / "manifest.json").read_text())
    damaged = tmp_path / "snapshot" / manifest["indexes"]["cosine-8-hnsw"]["index_file"]
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    (tmp_path / "snapshot" / manifest["indexes"]["sfs-32-exact"]["index_file"]).unlink()

    reopened = open_collection(tmp_path)
    rebuilt = reopened.stats().recovery["rebuilt"]
    assert set(rebuilt) == {"cosine-8-hnsw", "sfs-32-exact"}
    assert "checksum" in rebuilt["cosine-8-hnsw"]
    assert "unreadable" in rebuilt["sfs-32-exact"]
    assert results(reopened, vectors[:3], UNQUANTISED) == before


def test_row_names_come_from_the_snapshot_caught_up_or_else_from_the_store(
    tmp_path: Path, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    collection = open_collection(tmp_path)
    vectors = add(collection, rng, [f"d{i}" for i in range(150)])
    collection.snapshot()
    later = add(collection, rng, ["d0", "new"])  # d0 replaced
    collection.delete(["d1"])
    queries = np.concatenate([later, vectors[:3]])
    before = results(collection, queries, UNQUANTISED)  # hits named from the row names
    collection.close()

    def not_read(store: Store, chunk: int) -> None:
        pytest.fail("the row names were read from the store, not the snapshot")

    monkeypatch.setattr(Store, "iter_names", not_read)
    reopened = open_collection(tmp_path)
    assert results(reopened, queries, UNQUANTISED) == before
    reopened.close()
    monkeypatch.undo()
    manifest = json.loads((tmp_path / "snapshot" / "manifest.json").read_text())
    damaged = tmp_path / "snapshot" / manifest["row_names"]["file"]
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    reopened = open_collection(tmp_path)
    assert reopened.stats().recovery["rebuilt"] == {}  # the indexes still load
    assert results(reopened, queries, UNQUANTISED) == before


def test_an_unreadable_manifest_rebuilds_everything(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    collection = open_collection(tmp_path)
    vectors = add(collection, rng, [f"d{i}" for i in range(120)])
    collection.snapshot()
    before = results(collection, vectors[:3], UNQUANTISED)
    collection.close()
    (tmp_path / "snapshot" / "manifest.json").write_text("{not json")

    reopened = open_collection(tmp_path)
    recovery = reopened.stats().recovery
    assert recovery["loaded"] == [] and len(recovery["rebuilt"]) == 12
    assert all(reason.startswith("unusable manifest") for reason in recovery["rebuilt"].values())
    assert results(reopened, vectors[:3], UNQUANTISED) == before


def test_changed_parameters_rebuild_only_the_affected_indexes(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    collection = open_collection(tmp_path)
    vectors = add(collection, rng, [f"d{i}" for i in range(120)])
    collection.snapshot()
    collection.close()

    searching = open_collection(tmp_path, hnsw=HnswParams(ef_search=64))
    assert searching.stats().recovery["rebuilt"] == {}  # efSearch decides no graph's contents
    searching.close()

    reopened = open_collection(tmp_path, hnsw=HnswParams(m=16))
    rebuilt = reopened.stats().recovery["rebuilt"]
    assert set(rebuilt) == {"cosine-8-hnsw", "cosine-32-hnsw", "sfs-8-hnsw", "sfs-32-hnsw"}
    assert set(rebuilt.values()) == {"parameters changed since the snapshot"}
    assert reopened.search(vectors[3], 1, 32, "hnsw").hits[0][0].id == "d3"


def test_snapshots_replace_each_other_and_prune_the_change_log(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    collection = open_collection(tmp_path)
    add(collection, rng, [f"d{i}" for i in range(120)])
    collection.snapshot()
    first = set((tmp_path / "snapshot").iterdir())
    add(collection, rng, ["x"])
    assert collection.snapshot() == 121
    second = set((tmp_path / "snapshot").iterdir())
    assert not (first - {tmp_path / "snapshot" / "manifest.json"}) & second
    # the manifest, each index, each graph's tombstones and locality record, the row names
    assert len(second) == 1 + 12 + 4 + 4 + 1
    collection.close()
    store = Store(tmp_path / "store.sqlite3", 32)
    assert store.pruned_through == 121
    with pytest.raises(ValueError, match="no longer logged"):
        store.changes_since(100)
    store.close()
    reopened = open_collection(tmp_path)
    assert reopened.stats().recovery["caught_up_changes"] == 0
    assert len(reopened.stats().recovery["loaded"]) == 12


def test_a_snapshot_of_another_store_is_not_used(tmp_path: Path, rng: np.random.Generator) -> None:
    collection = open_collection(tmp_path / "a")
    add(collection, rng, [f"d{i}" for i in range(120)])
    collection.snapshot()
    collection.close()
    other = open_collection(tmp_path / "b")
    vectors = add(other, rng, ["only-in-b"])
    other.close()
    (tmp_path / "b" / "snapshot").mkdir()
    for path in (tmp_path / "a" / "snapshot").iterdir():
        (tmp_path / "b" / "snapshot" / path.name).write_bytes(path.read_bytes())

    reopened = open_collection(tmp_path / "b")
    assert reopened.stats().recovery["loaded"] == []
    assert "another store" in next(iter(reopened.stats().recovery["rebuilt"].values()))
    assert [hit.id for hit in reopened.search(vectors, 5, 32).hits[0]] == ["only-in-b"]
