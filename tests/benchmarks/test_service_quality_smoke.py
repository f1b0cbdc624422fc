"""Smoke run of the service-quality benchmark against the real service (a small V5 bundle)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.service_quality import C2F_FACTORS
from tests.benchmarks.smoke import run_smoke
from tests.service.bundles import v5_bundle


def test_service_quality_smoke_run(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    bundle = str(v5_bundle(tmp_path_factory))
    options = ("--documents", "300", "--queries", "40", "--mixed-size", "20")
    paths, record = run_smoke("service_quality", tmp_path, "--bundle", bundle, *options)
    assert record["bundle_objective"] == "v5"
    assert (record["documents"], record["queries"]) == (300, 40)
    assert (record["coarse_dimension"], record["fine_dimension"]) == (64, 256)
    # JSON object keys are strings.
    assert set(record["c2f_recall_at_10"]) == {str(factor) for factor in C2F_FACTORS}
    measures = [
        record["coarse_hit_domain_precision"],
        record["coarse_all_ten_same_domain"],
        record["hnsw_fine_recall_at_10"],
        record["auto_accuracy_50_50"],
        *record["c2f_recall_at_10"].values(),
    ]
    assert all(0.0 <= value <= 1.0 for value in measures)
    # A longer shortlist can only find more of the exact top 10 (the re-rank is exact).
    recalls = [record["c2f_recall_at_10"][str(factor)] for factor in C2F_FACTORS]
    assert recalls == sorted(recalls)
    assert "C2F recall@10" in paths[1].read_text(encoding="utf-8")
