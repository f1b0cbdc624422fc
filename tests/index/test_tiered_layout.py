"""The tiered layout: full vectors in a memory-mapped file (mapped on restart, caught up from the
change log, rebuilt when corrupted) and a per-prefix choice of index kinds."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from index import Collection, HnswParams
from index.embedded.vector_file import VectorFile

DIM, COARSE = 32, 8


def open_tiered(path: Path, full_dtype: str = "float32") -> Collection:
    """An HNSW graph at the coarse prefix only; fine queries go through C2F."""
    return Collection(
        path, DIM, (COARSE, DIM), layout={COARSE: ("hnsw",), DIM: ()}, full_dtype=full_dtype
    )


def add(collection: Collection, rng: np.random.Generator, names: list[str]) -> np.ndarray:
    vectors = rng.standard_normal((len(names), DIM)).astype(np.float32)
    collection.upsert(names, [f"text of {name}" for name in names], vectors)
    return vectors


def c2f(collection: Collection, queries: np.ndarray) -> list[list[tuple[str, float]]]:
    hits = collection.search_c2f(queries, 5, COARSE, factor=40, kind="hnsw").hits
    return [[(hit.id, hit.score) for hit in row] for row in hits]


def exact_top(vectors: np.ndarray, names: list[str], query: np.ndarray, k: int) -> list[str]:
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    scores = unit @ (query / np.linalg.norm(query))
    return [names[i] for i in np.argsort(-scores, kind="stable")[:k]]


def test_the_layout_builds_only_the_kinds_it_names(tmp_path: Path, rng: np.random.Generator):
    collection = open_tiered(tmp_path)
    names = [f"d{i}" for i in range(300)]
    vectors = add(collection, rng, names)
    stats = collection.stats()
    assert sorted(stats.indexes) == ["cosine-8-hnsw"]
    assert set(stats.ingest_seconds) == {"store", "full_vectors", "indexes"}
    assert all(seconds > 0 for seconds in stats.ingest_seconds.values())
    with pytest.raises(ValueError, match="no 'exact' index"):
        collection.search(vectors[:1], 5, DIM, "exact")
    query = rng.standard_normal(DIM).astype(np.float32)
    # A shortlist of every document makes C2F exact: the re-rank reads the full vectors' file.
    hits = collection.search_c2f(query, 5, COARSE, factor=60, kind="hnsw", ef_search=300).hits[0]
    assert [hit.id for hit in hits] == exact_top(vectors, names, query, 5)
    narrow = collection.search(vectors[:20], 10, COARSE, "hnsw", ef_search=10).hits
    wide = collection.search(vectors[:20], 10, COARSE, "hnsw", ef_search=300).hits
    exact_coarse = [exact_top(vectors[:, :COARSE], names, v[:COARSE], 10) for v in vectors[:20]]
    recall = {
        name: np.mean(
            [
                len({h.id for h in row} & set(truth)) / 10
                for row, truth in zip(rows, exact_coarse, strict=True)
            ]
        )
        for name, rows in (("narrow", narrow), ("wide", wide))
    }
    assert recall["wide"] == 1.0 and recall["narrow"] < recall["wide"]
    collection.close()


@pytest.mark.parametrize(
    "layout, message",
    [({16: ("hnsw",)}, "not a served prefix"), ({8: ("hnsw", "ivf")}, "must list some of")],
)
def test_a_bad_layout_is_refused(tmp_path: Path, layout: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Collection(tmp_path, DIM, (COARSE, DIM), layout=layout)


def test_restart_maps_the_file_and_catches_up_from_the_log(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    collection = open_tiered(tmp_path)
    add(collection, rng, [f"d{i}" for i in range(200)])
    collection.snapshot()
    later = add(collection, rng, [f"late{i}" for i in range(30)])
    collection.delete(["d0", "d1"])
    queries = rng.standard_normal((4, DIM)).astype(np.float32)
    before = c2f(collection, queries)
    collection.close()  # no snapshot: the 30 late rows are only in the store's change log

    reopened = open_tiered(tmp_path)
    recovery = reopened.stats().recovery["full_vectors"]
    assert recovery == {"action": "mapped", "reason": None, "rows_written": 30, "corrupt": ()}
    assert reopened.stats().documents == 228
    assert c2f(reopened, queries) == before
    assert c2f(reopened, later[:1])[0][0][0] == "late0"
    reopened.snapshot()
    reopened.close()
    again = open_tiered(tmp_path)
    assert again.stats().recovery["full_vectors"]["rows_written"] == 0
    again.close()


def _flip_a_byte_of_row_50(path: Path) -> None:
    with (path / "vectors.f32").open("r+b") as file:
        file.seek(VectorFile(path, DIM).data_offset + 50 * DIM * 4 + 7)
        byte = file.read(1)
        file.seek(-1, 1)
        file.write(bytes([byte[0] ^ 0xFF]))


def _append_a_row_the_header_does_not_count(path: Path) -> None:
    with (path / "vectors.f32").open("ab") as file:
        file.write(bytes(DIM * 4))


@pytest.mark.parametrize(
    ("damage", "reason"),
    [(_flip_a_byte_of_row_50, "checksum"), (_append_a_row_the_header_does_not_count, "header")],
)
def test_a_damaged_file_is_detected_and_rebuilt(
    tmp_path: Path, rng: np.random.Generator, damage: Callable[[Path], None], reason: str
) -> None:
    collection = open_tiered(tmp_path)
    add(collection, rng, [f"d{i}" for i in range(200)])
    collection.snapshot()
    queries = rng.standard_normal((4, DIM)).astype(np.float32)
    before = c2f(collection, queries)
    collection.close()
    damage(tmp_path)

    reopened = open_tiered(tmp_path)
    recovery = reopened.stats().recovery["full_vectors"]
    assert recovery["action"] == "rebuilt" and reason in recovery["reason"]
    assert recovery["rows_written"] == 200
    assert c2f(reopened, queries) == before
    reopened.close()


def test_float16_full_vectors_halve_the_file_and_keep_the_ranking(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    single = open_tiered(tmp_path / "f32")
    half = open_tiered(tmp_path / "f16", full_dtype="float16")
    names = [f"d{i}" for i in range(400)]
    vectors = rng.standard_normal((400, DIM)).astype(np.float32)
    for collection in (single, half):
        collection.upsert(names, ["t"] * 400, vectors)
    queries = rng.standard_normal((8, DIM)).astype(np.float32)
    for exact, rounded in zip(c2f(single, queries), c2f(half, queries), strict=True):
        assert [doc_id for doc_id, _ in rounded] == [doc_id for doc_id, _ in exact]
        np.testing.assert_allclose(
            [score for _, score in rounded], [score for _, score in exact], atol=2e-3
        )
    rows_bytes = {
        dtype: c.stats().full_vectors["bytes_on_disk"]
        - VectorFile(tmp_path, DIM, dtype).data_offset
        for dtype, c in (("float32", single), ("float16", half))
    }  # fmt: skip
    assert rows_bytes["float16"] * 2 == rows_bytes["float32"]
    single.close()
    half.close()


def test_a_graph_built_over_many_rows_is_sq8_from_the_start(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    """Bulk import: documents first, no index; the SQ8 graph then learns its ranges from a
    sample of the rows and is built once (no float32 graph and rebuild)."""
    collection = Collection(tmp_path, DIM, (COARSE, DIM), layout={COARSE: (), DIM: ()})
    add(collection, rng, [f"d{i}" for i in range(600)])
    collection.snapshot()
    collection.close()
    params = HnswParams(storage="sq8", sq_train_size=500)
    graph = Collection(
        tmp_path, DIM, (COARSE, DIM), layout={COARSE: ("hnsw",), DIM: ()}, hnsw=params
    )
    stats = graph.stats().indexes["cosine-8-hnsw"]
    assert stats["trained"] and stats["bytes_per_vector"] == COARSE and stats["vectors"] == 600
    graph.close()


def _replaced_three_times(path: Path, rng: np.random.Generator) -> tuple[Collection, list[str]]:
    """2,000 documents, each replaced three times: the first 6,000 rows are all removed."""
    collection = open_tiered(path)
    names = [f"d{i}" for i in range(2000)]
    for _ in range(4):
        add(collection, rng, names)
    return collection, names


def test_a_snapshot_gives_back_the_disk_of_replaced_rows_and_the_file_still_matches(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    collection, _ = _replaced_three_times(tmp_path, rng)
    full = collection.stats().full_vectors
    assert full["bytes_allocated"] >= full["bytes_on_disk"]  # nothing punched before a snapshot
    queries = rng.standard_normal((6, DIM)).astype(np.float32)
    before = c2f(collection, queries)
    collection.snapshot()
    full = collection.stats().full_vectors
    # 6,000 removed rows of 128 bytes were punched out; 2,000 live rows and the room left remain.
    assert full["bytes_allocated"] < 0.4 * full["bytes_on_disk"]
    assert c2f(collection, queries) == before
    collection.close()

    reopened = open_tiered(tmp_path)
    recovery = reopened.stats().recovery["full_vectors"]
    assert recovery["action"] == "mapped" and recovery["rows_written"] == 0
    assert c2f(reopened, queries) == before
    reopened.close()


def test_holes_listed_but_not_yet_punched_still_match_and_are_punched_at_open(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    """A crash between writing the record and punching leaves the removed rows' bytes in place
    (here: garbage written back over the holes); the file still matches its record."""
    collection, _ = _replaced_three_times(tmp_path, rng)
    collection.snapshot()
    queries = rng.standard_normal((6, DIM)).astype(np.float32)
    before = c2f(collection, queries)
    collection.close()
    record = json.loads((tmp_path / "vectors.json").read_text())
    assert record["holes"]
    with (tmp_path / "vectors.f32").open("r+b") as file:
        for start, end in record["holes"]:
            file.seek(start)
            file.write(rng.bytes(end - start))
    reopened = open_tiered(tmp_path)
    assert reopened.stats().recovery["full_vectors"]["action"] == "mapped"
    full = reopened.stats().full_vectors
    assert full["bytes_allocated"] < 0.4 * full["bytes_on_disk"]
    assert c2f(reopened, queries) == before
    reopened.close()


def test_removed_rows_scattered_between_live_ones_are_not_punched(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    collection = open_tiered(tmp_path)
    names = [f"d{i}" for i in range(3000)]
    add(collection, rng, names)
    collection.delete(names[::2])  # every run of removed rows is one row: no whole block
    queries = rng.standard_normal((6, DIM)).astype(np.float32)
    before = c2f(collection, queries)
    collection.snapshot()
    assert json.loads((tmp_path / "vectors.json").read_text())["holes"] == []
    assert c2f(collection, queries) == before
    collection.close()
