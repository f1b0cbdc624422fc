"""Smoke run of the MSHC benchmark: its files exist and its tables are complete and consistent."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import mshc
from tests.benchmarks.smoke import run_smoke
from training.mshc.pipeline import STAGES


def test_mshc_smoke_run(tmp_path: Path) -> None:
    paths, _ = run_smoke("mshc", tmp_path)
    assert sorted(p.name for p in paths) == [f"mshc_smoke.{s}" for s in ("json", "md", "png")]
    assert all(p.stat().st_size > 0 for p in paths)
    report = json.loads((tmp_path / "mshc_smoke.json").read_text(encoding="utf-8"))
    assert report["smoke"] is True and report["data"]["train"] == 1500

    cumulative = {row["name"]: row for row in report["cumulative"]}
    assert list(cumulative) == ["original", "mrl-full", "+mrl", "+vq", "+pq", "+sae", "+kd"]
    assert cumulative["original"]["rho"] > 0.999 and cumulative["original"]["knn_kept"] == 1.0
    assert [cumulative[n]["bytes_per_vector"] for n in ("+mrl", "+vq", "+pq", "+kd")] == [
        384, 1, 8, 128,
    ]
    assert [row["name"] for row in report["removal"]] == ["full", *(f"-{s}" for s in STAGES)]
    baselines = {row["name"]: row for row in report["baselines"]}
    assert len(baselines) == 7 and baselines["binary quantisation"]["bytes_per_vector"] == 48
    assert baselines["scalar int8"]["bytes_per_vector"] == 384
    assert baselines["MSHC full"]["knn"] == report["removal"][0]["knn"]
    for row in [*report["cumulative"], *report["removal"], *report["vq_variants"]]:
        assert -1.0 <= row["rho"] <= 1.0 and 0.0 <= row["knn"] <= 1.0 and 0.0 <= row["mrr"] <= 1.0

    variants = {row["name"]: row for row in report["vq_variants"]}
    assert set(variants) == {"vq", "rvq", "rvq-16", "fsq", "fsq-96x7"}
    assert variants["rvq-16"]["bytes_per_vector"] == 16
    assert variants["rvq"]["bytes_per_vector"] == mshc.SMOKE_CONFIG.rvq_stages
    assert 0.0 < variants["vq"]["used"] <= 1.0

    retrieval = {row["name"]: row for row in report["retrieval"]}
    assert retrieval["full"]["relative"] == 1.0
    full = retrieval["full"]["mrr"]
    assert all(abs(row["relative"] - row["mrr"] / full) < 1e-9 for row in retrieval.values())
    assert {t["name"] for t in report["targets"]} == {
        "mrl96_kept", "vq_rho_loss", "c2f_k100", "pq_rerank",
    }
    markdown = (tmp_path / "mshc_smoke.md").read_text(encoding="utf-8")
    assert "paper Table 13" in markdown and "paper Table 19" in markdown
