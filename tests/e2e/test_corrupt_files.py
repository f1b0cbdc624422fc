"""Damaged files in the index folder, found when a real service process starts: a FAISS
snapshot file with flipped bytes fails its sha256, is named in a warning line and rebuilt from
the store, with the same search results; a store whose SQLite page was overwritten fails
``PRAGMA quick_check`` and the process exits with status 2 and one ``error:`` line."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx

from benchmarks.harness.processes import ROOT, ServiceProcess, free_port, service_environment
from tests.servers import GRACEFUL_EXITS, TEST_SETTINGS

SETTINGS = {"index_kinds": "hnsw"}
TEXTS = [
    f"note {i}: the {['red', 'green', 'blue'][i % 3]} box number {i % 11}" * 3 for i in range(300)
]
QUERIES = ["a red box", "box number 7", "green note"]
PAGE = 4096


def _hits(client: httpx.Client) -> list[list[str]]:
    hits = []
    for granularity in ("coarse", "fine"):
        body = {"queries": QUERIES, "k": 5, "granularity": granularity}
        response = client.post("/search", json=body)
        assert response.status_code == 200, response.text
        hits += [[hit["id"] for hit in result["hits"]] for result in response.json()["results"]]
    return hits


def _flip_middle(path: Path, count: int) -> None:
    """Overwrite ``count`` bytes in the middle of the file with their complements."""
    payload = bytearray(path.read_bytes())
    middle = len(payload) // 2
    payload[middle : middle + count] = bytes(
        byte ^ 0xFF for byte in payload[middle : middle + count]
    )
    path.write_bytes(bytes(payload))


def _ingested(
    bundle: Path, index_dir: Path, launch: Callable[..., ServiceProcess]
) -> list[list[str]]:
    """Start, store the documents, stop gracefully (a snapshot); the searches' hits."""
    server = launch(bundle, index_dir, **SETTINGS)
    with server.client() as client:
        documents = [{"id": f"n{i}", "text": text} for i, text in enumerate(TEXTS)]
        for start in range(0, len(documents), 100):
            body = {"documents": documents[start : start + 100]}
            assert client.post("/documents", json=body).status_code == 200
        hits = _hits(client)
    assert server.stop() in GRACEFUL_EXITS
    return hits


def test_a_corrupted_snapshot_file_is_reported_and_rebuilt(
    tiny_bundle_dir: Path, tmp_path: Path, launch: Callable[..., ServiceProcess]
) -> None:
    index_dir = tmp_path / "index"
    before = _ingested(tiny_bundle_dir, index_dir, launch)
    manifest = json.loads((index_dir / "snapshot" / "manifest.json").read_text())
    name, entry = next(iter(manifest["indexes"].items()))
    _flip_middle(index_dir / "snapshot" / entry["index_file"], 64)

    server = launch(tiny_bundle_dir, index_dir, **SETTINGS)
    with server.client() as client:
        rebuilt = client.get("/info").json()["recovery"]["rebuilt"]
        assert list(rebuilt) == [name] and "does not match its checksum" in rebuilt[name]
        assert _hits(client) == before
    log = server.log.read_text()
    assert f"index {name} rebuilt from the store" in log and "checksum" in log


def test_a_corrupted_store_page_ends_the_start_with_one_error_line(
    tiny_bundle_dir: Path, tmp_path: Path, launch: Callable[..., ServiceProcess]
) -> None:
    index_dir = tmp_path / "index"
    _ingested(tiny_bundle_dir, index_dir, launch)
    store = index_dir / "store.sqlite3"
    assert (
        not (index_dir / "store.sqlite3-wal").exists()
        or not store.with_name("store.sqlite3-wal").stat().st_size
    )  # checkpointed at the graceful stop: the pages are in the file
    _flip_middle(store, PAGE)

    assert "is corrupt (" in _refused_start(tiny_bundle_dir, index_dir)


def _refused_start(bundle: Path, index_dir: Path, **settings: str) -> str:
    """Start ``python -m service`` on the folder; it must exit with status 2 and one
    ``error:`` line, which is returned."""
    env = service_environment(
        bundle, index_dir, free_port(), **TEST_SETTINGS, **SETTINGS, **settings
    )
    result = subprocess.run(
        [sys.executable, "-m", "service"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    return lines[0]


def _fractal_check(index_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "training.cli", "check", str(index_dir), "--no-progress"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_flipped_byte_in_a_stored_text_is_never_served_and_is_named(
    tiny_bundle_dir: Path, tmp_path: Path, launch: Callable[..., ServiceProcess]
) -> None:
    index_dir = tmp_path / "index"
    _ingested(tiny_bundle_dir, index_dir, launch)
    store = index_dir / "store.sqlite3"
    payload = bytearray(store.read_bytes())
    at = payload.find(TEXTS[123].encode())
    assert at >= 0 and payload.find(TEXTS[123].encode(), at + 1) < 0
    payload[at] ^= 0x20  # "note 123" → "Note 123": still text, SQLite's page check sees nothing
    store.write_bytes(bytes(payload))

    line = _refused_start(tiny_bundle_dir, index_dir, store_check="full")
    assert "'n123'" in line and "does not match its checksum" in line

    checked = _fractal_check(index_dir)
    assert checked.returncode == 1, checked.stderr
    assert "default: 300 documents, 1 problem(s)" in checked.stdout and "'n123'" in checked.stdout

    server = launch(tiny_bundle_dir, index_dir, **SETTINGS)  # the quick check at start
    with server.client() as client:
        for answer in (
            client.get("/documents/n123"),
            client.post("/search", json={"queries": [TEXTS[123]], "k": 3}),
        ):
            assert answer.status_code == 500, answer.text
            error = answer.json()["error"]
            assert error["type"] == "data_corrupt" and "'n123'" in error["message"]
            assert TEXTS[123][1:] not in answer.text  # nothing of the damaged row is served
        assert client.get("/documents/n124").json()["text"] == TEXTS[124]
        assert client.post("/search", json={"queries": [TEXTS[7]], "k": 1}).status_code == 200
        healed = {"documents": [{"id": "n123", "text": TEXTS[123]}]}
        assert client.post("/documents", json=healed).status_code == 200
        assert client.get("/documents/n123").json()["text"] == TEXTS[123]
    assert "'n123'" in server.log.read_text()  # the 500s are logged with the id
    assert _fractal_check(index_dir).returncode == 0
