"""The backends benchmark's smoke run: toy vectors, 3,000 documents in the embedded backend and in
the milvus-lite server the benchmark starts, with the tiny bundle's layout (coarse 64, shortlist
192, fine 384)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import faiss
import pytest

from benchmarks import backends
from benchmarks.harness.processes import MILVUS_INSTALL
from tests.benchmarks.smoke import run_smoke
from tests.servers import require_binary
from tests.tiny_bundle import build_tiny_bundle


@pytest.fixture(autouse=True)
def restore_faiss_threads() -> Iterator[None]:
    before = faiss.omp_get_max_threads()
    yield
    faiss.omp_set_num_threads(before)


def test_backends_smoke_run(tmp_path: Path) -> None:
    require_binary("milvus-lite", MILVUS_INSTALL)
    build_tiny_bundle(tmp_path / "bundle", shortlist_dim=192)
    paths, report = run_smoke("backends", tmp_path / "out", "--bundle", str(tmp_path / "bundle"))
    assert sorted(path.name for path in paths) == [
        f"backends_smoke.{suffix}" for suffix in ("json", "md", "png")
    ]
    smoke = backends.SMOKE
    assert (
        report["bundle"] | {"coarse_dim": 64, "shortlist_dim": 192, "fine_dim": 384}
        == (report["bundle"])
    )
    assert report["c2f_shortlist"] == 40
    expected = {
        (route, backend, ef)
        for route in ("coarse", "fine", "c2f")
        for backend in backends.BACKENDS
        for ef in smoke.ef_values
    } | {
        ("filtered", backend, ef) for backend in backends.BACKENDS for ef in smoke.filter_ef_values
    }
    assert {(r["route"], r["backend"], r["ef_search"]) for r in report["sweep"]} == expected
    for row in report["sweep"]:
        assert 0.0 <= row["recall_at_10"] <= 1.0 and row["k_hits_fraction"] == 1.0, row
    for entry in report["latency"]:
        assert entry["p50_us"] > 0 and entry["p99_us"] >= entry["p50_us"], entry
        # One query per call finds what the batch call found.
        assert entry["same_hits_as_batch"] == 1.0, entry
    # 3,000 documents: both backends' graphs find (nearly) everything at the largest efSearch.
    for row in report["sweep"]:
        if row["ef_search"] == max(smoke.ef_values) and row["route"] != "c2f":
            assert row["recall_at_10"] >= 0.9, row
    milvus = report["ingest"]["milvus"]
    assert milvus["settled"]["unindexed"] == 0 and not milvus["settled"]["compaction_pending"]
    assert sum(milvus["segment_rows"]) == smoke.documents
    assert report["ingest"]["embedded"]["documents_per_s"] > 0 and milvus["documents_per_s"] > 0
    assert len(report["targets"]) == 6
    markdown = (tmp_path / "out" / "backends_smoke.md").read_text(encoding="utf-8")
    assert "milvus-lite is Milvus's development engine" in markdown
