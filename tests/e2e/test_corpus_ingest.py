"""``fractal ingest FILE``: a user's corpus reaches a real service over HTTP. Bad rows are reported
by line (Parquet: row) while the good ones are stored; ``--resume`` after ``kill -9`` sends only
what is missing; bad command lines end with one ``error:`` line and exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from support.client import FractalClient
from support.processes import ROOT, ServiceProcess
from tests.bulk.helpers import assert_one_error, run_cli
from tests.servers import GRACEFUL_EXITS, start_server

ROWS = 10_000
BAD_LINES = {17: '{"id": "doc-16", "text": ', 512: '{"id": "doc-511", "text": "  "}'}
BAD_LINES[9_001] = '{"id": "doc-9000", "text": "fine", "metadata": [1, 2]}'
GOOD_IDS = [f"doc-{i}" for i in range(ROWS) if i + 1 not in BAD_LINES]
KILL_AFTER_DOCUMENTS = 1_000
KILL_TIMEOUT_S = 120.0


def _document(i: int) -> dict:
    topics = ("banking", "travel", "music", "cooking", "weather")
    return {
        "id": f"doc-{i}",
        "text": f"note {i}: a question about {topics[i % 5]} number {i * 7919 % 10007}",
        "metadata": {"topic": topics[i % 5], "n": i},
    }


def _big_corpus(path: Path) -> Path:
    """``ROWS`` lines, three of them bad (``BAD_LINES``, by line number)."""
    lines = [BAD_LINES.get(i + 1) or json.dumps(_document(i)) for i in range(ROWS)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def server(tiny_bundle_dir: Path, tmp_path: Path) -> Iterator[ServiceProcess]:
    service = start_server(tiny_bundle_dir, tmp_path / "index", tmp_path / "service.log")
    try:
        yield service
    finally:
        if service.process.poll() is None:
            service.kill()


def _documents(service: ServiceProcess) -> int:
    return httpx.get(f"{service.base_url}/info", timeout=30).json()["documents"]


def _expected_summary(stored: int, skipped: int | None = None) -> str:
    skip = "" if skipped is None else f", skipped {skipped:,} already stored"
    return f"stored {stored:,}{skip}, rejected 3: lines 17, 512, 9,001"


def _check_store(service: ServiceProcess) -> None:
    """Every good row is stored once, with its text and metadata; no bad row is."""
    assert _documents(service) == len(GOOD_IDS)
    with FractalClient(service.base_url) as client:
        assert client.stored_ids(GOOD_IDS) == set(GOOD_IDS)
        assert client.stored_ids(["doc-16", "doc-511", "doc-9000"]) == set()
        for i in (0, 15, 17, 4_999, ROWS - 1):
            stored = client.request("GET", f"/documents/doc-{i}").json()
            assert stored == _document(i)


def test_a_corpus_with_three_bad_lines_stores_the_others(
    capsys: pytest.CaptureFixture[str], server: ServiceProcess, tmp_path: Path
) -> None:
    corpus = _big_corpus(tmp_path / "corpus.jsonl")
    rejects = tmp_path / "rejects.jsonl"
    status, out, err = run_cli(
        capsys, "ingest", corpus, "--url", server.base_url, "--no-progress", "--rejects", rejects
    )
    assert status == 1, err
    assert out.strip().splitlines()[-1] == _expected_summary(len(GOOD_IDS))
    assert err.strip().splitlines() == [
        f"{corpus}, line 17: not valid JSON (Expecting value at column 26)",
        f"{corpus}, line 512: the text is missing, empty or not a string ('  ')",
        f"{corpus}, line 9001: the metadata is not a JSON object ([1, 2])",
    ]
    listed = [json.loads(line) for line in rejects.read_text(encoding="utf-8").splitlines()]
    assert [(entry["line"], entry["id"]) for entry in listed] == [
        (17, None),
        (512, "doc-511"),
        (9001, "doc-9000"),
    ]
    _check_store(server)
    assert server.stop() in GRACEFUL_EXITS


def test_resume_after_kill_sends_only_what_is_missing(
    capsys: pytest.CaptureFixture[str], server: ServiceProcess, tmp_path: Path
) -> None:
    corpus = _big_corpus(tmp_path / "corpus.jsonl")
    command = [sys.executable, "-m", "training.cli", "ingest", str(corpus)]
    command += ["--url", server.base_url, "--batch-size", "50", "--no-progress"]
    ingest = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + KILL_TIMEOUT_S
        while _documents(server) < KILL_AFTER_DOCUMENTS and time.monotonic() < deadline:
            time.sleep(0.01)
        still_running = ingest.poll() is None
        ingest.kill()
    finally:
        ingest.wait(30)
    assert still_running and ingest.returncode == -9, "the ingest ended before the kill"
    acknowledged = _documents(server)
    assert KILL_AFTER_DOCUMENTS <= acknowledged < len(GOOD_IDS)

    status, out, err = run_cli(
        capsys, "ingest", corpus, "--url", server.base_url, "--resume", "--no-progress"
    )
    assert status == 1, err
    expected = _expected_summary(len(GOOD_IDS) - acknowledged, skipped=acknowledged)
    assert out.strip().splitlines()[-1] == expected
    _check_store(server)

    # A second resume has nothing left to send.
    status, out, _ = run_cli(
        capsys, "ingest", corpus, "--url", server.base_url, "--resume", "--no-progress"
    )
    assert status == 1
    assert out.strip().splitlines()[-1] == _expected_summary(0, skipped=len(GOOD_IDS))
    assert server.stop() in GRACEFUL_EXITS
