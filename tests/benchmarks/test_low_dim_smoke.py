"""Smoke runs of the low-dimension (MIC/MIPIC vs MRL) and SFS retrieval benchmarks: their files
exist and their numbers are sane scores (no timings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmarks.smoke import run_smoke


@pytest.mark.slow
def test_low_dim_smoke(tmp_path: Path) -> None:
    run_smoke("low_dim", tmp_path, "--dims", "16,64,384")
    name = "low_dim_banking77_smoke"
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [f"{name}.{suffix}" for suffix in ("json", "md", "png")]
    report = json.loads((tmp_path / f"{name}.json").read_text(encoding="utf-8"))
    assert [r["objective"] for r in report["runs"]] == ["raw", "mrl", "mic", "mipic"]
    for run in report["runs"]:
        assert len(run["lr_macro_f1"]) == len(run["knn_accuracy"]) == 3
        assert all(0 <= v <= 1 for v in run["lr_macro_f1"] + run["knn_accuracy"])
    assert set(report["summary"]) == {"raw", "mrl", "mic", "mipic"}
    assert "Difference to matched MRL" in (tmp_path / f"{name}.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_sfs_retrieval_smoke(tmp_path: Path) -> None:
    run_smoke("sfs_retrieval", tmp_path, "--fragments", "256,64,16")
    report = json.loads((tmp_path / "sfs_retrieval_clinc150_smoke.json").read_text("utf-8"))
    assert set(report["mean"]) == {"256", "64", "16"}
    for by_scoring in report["mean"].values():
        assert set(by_scoring) == {"cosine", "sfs-64", "sfs-16"}
        for metrics in by_scoring.values():
            assert 0 <= metrics["recall@1"] <= metrics["recall@10"] <= 1
            assert metrics["recall@1"] <= metrics["mrr@10"] <= metrics["recall@10"]
