"""The crasher: its smoke run (10 kills of the real service, every invariant checked after each
restart, none violated), the ledger's settling of writes in flight, and its checker, which must
report a lost write, a phantom document and a changed vector when they are there."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import httpx
import numpy as np
import pytest

from benchmarks import crasher
from benchmarks.harness.crash_checks import Checker
from benchmarks.harness.crash_clients import Workload
from benchmarks.harness.crash_ledger import DEFAULT, Ledger, Stored, vector_hash
from benchmarks.harness.processes import live_service
from tests.benchmarks.smoke import run_smoke


def test_crasher_smoke_run(tmp_path: Path, tiny_bundle_dir: Path) -> None:
    paths, report = run_smoke("crasher", tmp_path, "--bundle", str(tiny_bundle_dir))
    assert [path.name for path in paths] == [
        f"crasher_smoke.{suffix}" for suffix in ("json", "md", "png")
    ]
    assert report["kills"] == crasher.SMOKE.rounds
    assert report["violation_count"] == 0, report["violations"]
    assert report["acknowledged_writes"] > 0 and report["comparisons"] > 0
    assert all(target["met"] for target in report["targets"]), report["targets"]
    checked = [r for r in report["rounds"] if "violations" in r]
    assert len(checked) >= 2 * len(crasher.SMOKE.variants)  # the last check of each variant


def _stored(text: str) -> Stored:
    return Stored(text, {"client": 0})


def test_the_ledger_settles_writes_in_flight_either_way_but_never_half() -> None:
    ledger = Ledger()
    a, b = (DEFAULT, "c0-1"), (DEFAULT, "c0-2")
    ledger.acknowledge(ledger.begin("upsert", {a: _stored("a1"), b: _stored("b1")}))
    applied = ledger.begin("upsert", {a: _stored("a2")})
    problems, count = ledger.resolve([DEFAULT], {a: _stored("a2")})
    assert (problems, count) == ([], 1) and ledger.expected(a) == _stored("a2")
    assert applied not in ledger.pending

    ledger.begin("delete", {b: None})
    problems, count = ledger.resolve([DEFAULT], {b: _stored("b1")})  # not applied: kept
    assert (problems, count) == ([], 0) and ledger.expected(b) == _stored("b1")

    ledger.begin("upsert", {a: _stored("a3"), b: _stored("b3")})
    problems, _ = ledger.resolve([DEFAULT], {a: _stored("a3"), b: _stored("b1")})
    assert problems == ["upsert: half of the request was applied"]

    ledger.begin("upsert", {a: _stored("a4")})
    problems, _ = ledger.resolve([DEFAULT], {a: _stored("something else")})
    assert len(problems) == 1 and "neither" in problems[0]

    ledger.begin_collection("crash-0", ("exact",))
    assert ledger.resolve([DEFAULT, "crash-0"], {}) == ([], 1)
    assert "crash-0" in ledger.collections


@pytest.fixture
def served(tmp_path: Path, tiny_bundle_dir: Path):
    with live_service(
        tiny_bundle_dir, tmp_path / "index", tmp_path / "service.log", index_kinds="exact,hnsw"
    ) as base_url:
        yield base_url, tmp_path / "index"


def test_the_checker_reports_lost_phantom_and_changed_documents(served) -> None:
    base_url, index_dir = served
    info = httpx.get(f"{base_url}/info").json()
    workload = Workload(base_url, info["manifest"]["dim"], info["bundle_hash"], ("exact",), 4, 2)
    ledger = Ledger()
    vector = np.full(workload.dim, 0.05, np.float32)
    documents = [
        {"id": doc_id, "text": text, "metadata": {"client": 0}, "vector": vector.tolist()}
        for doc_id, text in (("c0-0", "kept note"), ("c0-1", "phantom note"))
    ]
    body = {"bundle_hash": workload.bundle_hash, "documents": documents}
    httpx.post(f"{base_url}/documents/vectors", json=body).raise_for_status()
    ledger.documents[(DEFAULT, "c0-0")] = Stored("kept note", {"client": 0}, vector_hash(vector))
    checker = Checker(workload, ledger, 1, index_dir, 2, np.random.default_rng(0))
    found = checker.check().violations
    assert any("c0-1 is there but was deleted or never acked" in v for v in found), found
    assert not any("c0-0" in v for v in found), found

    ledger.documents[(DEFAULT, "c0-1")] = Stored("phantom note", {"client": 0}, "0" * 64)
    ledger.documents[(DEFAULT, "c0-2")] = Stored("lost note", {"client": 0})
    found = checker.check().violations
    assert any("c0-2 was acknowledged but is missing" in v for v in found), found
    assert any("c0-1: its vector is not the one sent" in v for v in found), found
    assert any("counts 2 documents, 3 acknowledged" in v for v in found), found

    with closing(sqlite3.connect(index_dir / "store.sqlite3")) as db:  # behind the service's back
        db.execute("UPDATE documents SET text = 'edited' WHERE doc_id = 'c0-0'")
        db.commit()
    found = checker.check().violations
    assert any("c0-0" in v and "does not match its checksum" in v for v in found), found
