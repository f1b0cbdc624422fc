"""Searches from several threads while another thread writes; the readers-writer lock's turns."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from index import Collection, HnswParams
from index.embedded import FilterParams
from index.embedded.writing import CHUNK
from index.filters import parse_filter
from index.locking import ReadWriteLock


@pytest.mark.parametrize("packed", [False, True], ids=["faiss-links", "packed-links"])
def test_searches_during_upserts_and_deletes_return_only_real_documents(
    tmp_path: Path, rng: np.random.Generator, packed: bool
) -> None:
    """With packed links each round ends in a snapshot, after which the graph packs its links
    while searches run (and the next write unpacks them)."""
    hnsw = HnswParams(packed_links=packed)
    collection = Collection(tmp_path, 32, (8, 32), ("exact", "hnsw"), hnsw, fragment_dim=8)
    initial = [f"d{i}" for i in range(300)]
    collection.upsert(initial, ["t"] * 300, rng.standard_normal((300, 32)))
    ever_written = set(initial)

    def write() -> None:
        local = np.random.default_rng(7)
        for round_ in range(15):
            names = [f"r{round_}-{i}" for i in range(40)] + [f"d{round_}"]  # one replacement
            ever_written.update(names)
            collection.upsert(names, ["t"] * len(names), local.standard_normal((41, 32)))
            collection.delete([f"d{100 + round_}", f"r{round_ - 1}-0"])
            if packed:
                collection.snapshot()

    def search_once(local: np.random.Generator, _: int) -> None:
        queries = local.standard_normal((3, 32)).astype(np.float32)
        batches = [
            collection.search(queries, 10, 8, "hnsw").hits,
            collection.search(queries, 10, 32, "exact", "sfs").hits,
            collection.search_c2f(queries, 10, 8, factor=3, kind="hnsw").hits,
        ]
        for hits in (row for batch in batches for row in batch):
            ids = [hit.id for hit in hits]
            assert len(ids) == 10 and len(set(ids)) == 10, ids
            assert set(ids) <= ever_written, set(ids) - ever_written
            scores = [hit.score for hit in hits]
            assert scores == sorted(scores, reverse=True)

    assert _search_while_writing(write, search_once, readers=3) > 0

    live = set(initial) | {f"r{r}-{i}" for r in range(15) for i in range(40)}
    live -= {f"d{100 + r}" for r in range(15)} | {f"r{r}-0" for r in range(14)}
    stats = collection.stats()
    assert stats.documents == len(live)
    assert all(entry["vectors"] == len(live) for entry in stats.indexes.values())
    graphs = [entry for name, entry in stats.indexes.items() if name.endswith("-hnsw")]
    assert graphs and all(entry["links_packed"] == packed for entry in graphs)
    final = collection.search(rng.standard_normal((5, 32)), 50, 32, "hnsw").hits
    assert all(hit.id in live and collection.get(hit.id) for row in final for hit in row)


def test_searches_run_between_the_chunks_of_a_large_upsert(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    """A search that waits for the write lock gets in at the next chunk boundary, so it sees a
    partly indexed batch rather than waiting for the whole batch."""
    collection = Collection(tmp_path, 16, (16,), ("exact",))
    total = 40 * CHUNK
    vectors = rng.standard_normal((total, 16))
    seen: set[int] = set()
    done = threading.Event()

    def searcher() -> None:
        while not done.is_set():
            collection.search(vectors[0], 1, 16)
            seen.add(collection.stats().documents)

    thread = threading.Thread(target=searcher)
    thread.start()
    collection.upsert([f"d{i}" for i in range(total)], ["t"] * total, vectors)
    done.set()
    thread.join()
    assert any(0 < count < total for count in seen), sorted(seen)


def test_a_writer_waits_for_readers_and_then_readers_waiting_go_before_the_next_writer() -> None:
    lock = ReadWriteLock()
    events: list[str] = []
    reader_in = threading.Event()
    release_reader = threading.Event()

    def long_reader() -> None:
        with lock.read():
            reader_in.set()
            release_reader.wait()
            events.append("reader 1 out")

    def writer(name: str) -> None:
        with lock.write():
            events.append(f"{name} in")

    def reader(name: str) -> None:
        with lock.read():
            events.append(f"{name} in")

    first = threading.Thread(target=long_reader)
    first.start()
    reader_in.wait()
    assert not lock.writer_active
    writer_a = threading.Thread(target=writer, args=("writer a",))
    writer_a.start()
    while not lock._writers_waiting:  # noqa: SLF001 - wait until the writer is queued
        threading.Event().wait(0.001)
    assert lock.writer_active  # waiting counts: a reader now would wait
    late_reader = threading.Thread(target=reader, args=("reader 2",))
    late_reader.start()
    while not lock._readers_waiting:  # noqa: SLF001
        threading.Event().wait(0.001)
    assert events == []  # the writer waits for reader 1; reader 2 waits behind the writer
    release_reader.set()
    for thread in (first, writer_a, late_reader):
        thread.join()
    assert events == ["reader 1 out", "writer a in", "reader 2 in"]
    assert not lock.writer_active
    with lock.write():
        assert lock.writer_active


def test_filtered_searches_during_writes_return_only_matching_documents(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    """Every path of a filtered search (graph walk, scan, exact subset) while another thread
    upserts, replaces and deletes: hits always match the filter (a document's group is in its
    id and never changes), and ten come back (at least ten always match)."""
    collection = Collection(tmp_path, 32, (8, 32), ("exact", "hnsw"))
    names = [f"g{i % 3}-{i}" for i in range(300)]
    collection.upsert(names, ["t"] * 300, rng.standard_normal((300, 32)), _groups(names))
    where = parse_filter({"key": "group", "eq": 0})

    def write() -> None:
        local = np.random.default_rng(11)
        for round_ in range(15):
            batch = [f"g{i % 3}-r{round_}-{i}" for i in range(30)] + [f"g0-{3 * round_}"]
            collection.upsert(batch, ["t"] * 31, local.standard_normal((31, 32)), _groups(batch))
            collection.delete([f"g0-{150 + 3 * round_}", f"g1-{1 + 3 * round_}"])

    paths = [FilterParams(exact_subset_scale=0.0), FilterParams(exact_subset_scale=1e9)]

    def search_once(local: np.random.Generator, searches: int) -> None:
        collection.filters = paths[searches % 2]
        queries = local.standard_normal((3, 32)).astype(np.float32)
        batches = [
            collection.search(queries, 10, 8, "hnsw", where=where).hits,
            collection.search(queries, 10, 32, "exact", where=where).hits,
            collection.search_c2f(queries, 10, 8, factor=3, kind="hnsw", where=where).hits,
        ]
        for hits in (row for batch in batches for row in batch):
            ids = [hit.id for hit in hits]
            assert len(ids) == 10 and len(set(ids)) == 10, ids
            assert all(name.startswith("g0-") for name in ids), ids
            scores = [hit.score for hit in hits]
            assert scores == sorted(scores, reverse=True)

    assert _search_while_writing(write, search_once, readers=2) > 0
    group0 = {
        hit.id for hit in collection.search(np.ones(32), 1000, 32, "exact", where=where).hits[0]
    }
    assert all(name.startswith("g0-") and collection.get(name) for name in group0)


def _groups(names: list[str]) -> list[dict]:
    return [{"group": int(name[1])} for name in names]


def _search_while_writing(
    write: Callable[[], None], search_once: Callable[[np.random.Generator, int], None], readers: int
) -> int:
    """Run ``write`` in one thread and ``search_once(rng, searches so far)`` in a loop in
    ``readers`` others until the writer is done; re-raise the first error of any thread; the
    number of searches."""
    errors: list[BaseException] = []
    searches = [0]
    writing = threading.Event()
    writing.set()

    def writer() -> None:
        try:
            write()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            writing.clear()

    def searcher(seed: int) -> None:
        local = np.random.default_rng(seed)
        try:
            while writing.is_set():
                search_once(local, searches[0])
                searches[0] += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=searcher, args=(seed,)) for seed in range(readers)]
    threads.append(threading.Thread(target=writer))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return searches[0]
