"""A full disk under ingest, on a real service whose index folder is a small tmpfs of its own
(:mod:`tests.e2e.private_disk`): a write the disk cannot hold is a 507 with nothing of it
stored, whether SQLite or the full vectors' file ran out of room, and so is a collection's
creation (no folder of it left); searches go on, failed
snapshots are logged and retried, ingest resumes once space is freed, and every acknowledged
document is there after a restart."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from benchmarks.harness.processes import ServiceProcess, wait_until
from tests.e2e.private_disk import PrivateDisk, PrivateDiskUnavailable
from tests.servers import GRACEFUL_EXITS

DISK_BYTES = 24 << 20
SETTINGS = {
    "index_kinds": "hnsw",
    "fine_index_kinds": "none",
    "snapshot_interval_s": "0.5",
    "log_level": "info",  # snapshots written are logged too
}
BATCH = 10
MAX_BATCHES = 200
TEXT = "a note about the red box, the green box and the blue box, number {0} " * 30
COLLECTION = "notes"
SNAPSHOT_FAILED = "index snapshot of collection 'default' failed"
SNAPSHOT_WRITTEN = "collection 'default': index snapshot written"
VECTORS_FILE_ROWS = 1024
"""The full vectors' file starts with room for this many rows, then grows by an eighth."""
VECTORS_FILE_GROWTH_BYTES = VECTORS_FILE_ROWS // 8 * 384 * 4
"""Its first growth: 128 rows of 384-d float32 vectors."""
REFUSED = "POST /documents refused"


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[PrivateDisk]:
    try:
        mounted = PrivateDisk.mount(tmp_path / "disk", DISK_BYTES)
    except PrivateDiskUnavailable as unavailable:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(str(unavailable))
        pytest.skip(str(unavailable))
    try:
        yield mounted
    finally:
        mounted.unmount()


class Ingest:
    """Numbered batches of documents, and which were acknowledged (200) or refused (507)."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.acknowledged: list[str] = []
        self.refused: list[str] = []
        self.next = 0

    def batch(self, size: int = BATCH, text: str = TEXT) -> httpx.Response:
        ids = [f"doc-{self.next + i}" for i in range(size)]
        self.next += size
        documents = [{"id": doc_id, "text": text.format(doc_id)} for doc_id in ids]
        response = self.client.post("/documents", json={"documents": documents})
        assert response.status_code in (200, 507), response.text
        (self.acknowledged if response.status_code == 200 else self.refused).extend(ids)
        return response

    def until_refused(self) -> httpx.Response:
        """Batches until one gets 507 (bounded)."""
        for _ in range(MAX_BATCHES):
            response = self.batch()
            if response.status_code == 507:
                return response
        raise AssertionError(f"{MAX_BATCHES} batches on a full disk were all stored")

    def present(self, client: httpx.Client) -> set[str]:
        every = self.acknowledged + self.refused
        found: set[str] = set()
        for start in range(0, len(every), 100):
            body = {"ids": every[start : start + 100]}
            found.update(client.post("/documents/lookup", json=body).json()["found"])
        return found


def _searches(client: httpx.Client) -> None:
    for granularity in ("coarse", "fine"):
        params = {"q": "the red box", "k": 5, "granularity": granularity}
        response = client.get("/search", params=params)
        assert response.status_code == 200, response.text
        assert len(response.json()["hits"]) == 5


def _snapshot_at(log: Path, change: int) -> bool:
    """A snapshot of the collection at store change ``change`` has been written."""
    return f"{SNAPSHOT_WRITTEN} at change {change} " in log.read_text()


def _snapshots_caught_up(log: Path) -> bool:
    """No snapshot failed since the last one written (or none ever failed)."""
    text = log.read_text()
    failed = text.rfind(SNAPSHOT_FAILED)
    return failed < 0 or failed < text.rfind(SNAPSHOT_WRITTEN)


def _assert_refused(response: httpx.Response) -> None:
    error = response.json()["error"]
    assert error["type"] == "insufficient_storage"
    assert "FRACTAL_INDEX_DIR" in error["message"] and "nothing" in error["message"]


def _create_collection(client: httpx.Client, folder: Path, status: int) -> httpx.Response:
    """``POST /collections`` of ``notes``, answered ``status``; its ``folder`` is there only
    when it was created."""
    response = client.post("/collections", json={"name": COLLECTION})
    assert response.status_code == status, response.text
    assert folder.is_dir() == (status == 201)
    return response


def test_a_full_disk_refuses_writes_whole_and_loses_nothing_acknowledged(
    tiny_bundle_dir: Path, disk: PrivateDisk, launch: Callable[..., ServiceProcess]
) -> None:
    index_dir = disk.mount_point / "index"
    server = launch(tiny_bundle_dir, index_dir, wrapper=disk.wrapper, **SETTINGS)
    log = server.log
    with server.client() as client:
        ingest = Ingest(client)
        for _ in range(10):
            assert ingest.batch().status_code == 200

        # SQLite runs out of room first: the rows fit the vectors file's first 1024.
        filler = disk.fill("filler", leave_bytes=256 << 10)
        _assert_refused(ingest.until_refused())
        assert ingest.next < VECTORS_FILE_ROWS
        _searches(client)
        assert client.get(f"/documents/{ingest.acknowledged[-1]}").status_code == 200
        assert "database or disk is full" in log.read_text()
        # A small write acknowledged with 64 KiB left leaves a snapshot to take, with no room
        # for its index files: it fails, and is logged. (The writes before the refusal may all
        # have been snapshotted while there was still room.)
        filler.unlink()
        wait_until(lambda: _snapshots_caught_up(log), "the failed snapshots retried", 10.0)
        filler = disk.fill("filler", leave_bytes=64 << 10)
        assert ingest.batch(1, "a short note {0}").status_code == 200
        wait_until(lambda: SNAPSHOT_FAILED in log.read_text(), "a failed snapshot", 10.0)
        assert server.process.poll() is None
        _searches(client)
        folder = disk.outside(index_dir / "collections" / COLLECTION)
        assert folder.parents[1].is_dir()  # the index folder, as the service sees it
        _assert_refused(_create_collection(client, folder, 507))
        filler.unlink()
        assert ingest.batch().status_code == 200  # resumes once there is room
        _create_collection(client, folder, 201)

        # Then the full vectors' file cannot grow past its first rows, with room left for SQLite.
        while len(ingest.acknowledged) + BATCH <= VECTORS_FILE_ROWS:
            assert ingest.batch().status_code == 200
        # No snapshot may be under way while the disk is filled: one that failed afterwards
        # would remove what it had written and free room. Each document is one change.
        last = len(ingest.acknowledged)
        wait_until(lambda: _snapshot_at(log, last), "a snapshot of the last write", 20.0)
        filler = disk.fill("filler", leave_bytes=VECTORS_FILE_GROWTH_BYTES // 2)
        _assert_refused(ingest.batch())
        refusals = [line for line in log.read_text().splitlines() if REFUSED in line]
        assert refusals[-1].endswith("No space left on device)"), refusals[-1]  # not SQLite
        _searches(client)
        filler.unlink()
        assert ingest.batch().status_code == 200
        assert ingest.present(client) == set(ingest.acknowledged)
    assert server.stop() in GRACEFUL_EXITS

    server = launch(tiny_bundle_dir, index_dir, wrapper=disk.wrapper, **SETTINGS)
    with server.client() as client:
        assert ingest.present(client) == set(ingest.acknowledged)
        assert client.get("/info").json()["documents"] == len(ingest.acknowledged)
        _searches(client)
