"""Smoke run of the request-path benchmark: the app in process, lean and FastAPI's handlers."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.request_path import PATHS, SEARCHES, SMOKE, workloads
from tests.benchmarks.smoke import run_smoke
from tests.service.bundles import v5_bundle


def test_request_path_smoke_run(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    bundle = str(v5_bundle(tmp_path_factory))
    paths, report = run_smoke("request_path", tmp_path, "--bundle", bundle)
    assert sorted(path.name for path in paths) == [
        f"request_path_smoke.{suffix}" for suffix in ("json", "md", "png")
    ]
    assert report["corpus"]["documents"] == SMOKE.documents
    names = [workload.name for workload in workloads("model")]
    assert names == ["health", "embed", "openai", "coarse", "fine", "c2f", "batch"]
    assert [row["workload"] for row in report["rows"]] == names
    for row in report["rows"]:
        assert all(row[f"{path}_us"] > 0 for path in PATHS), row
        assert (row["index_us"] is not None) == (row["workload"] in SEARCHES), row
        assert row["index_us"] is None or row["index_us"] > 0, row
    assert "stand-in" in (tmp_path / "request_path_smoke.md").read_text(encoding="utf-8")
    assert len(report["targets"]) == 1
