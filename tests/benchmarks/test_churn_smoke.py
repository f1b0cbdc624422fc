"""The churn benchmark: a smoke run writes its files, one reading per round, and both targets."""

from __future__ import annotations

from pathlib import Path

from benchmarks import churn
from tests.benchmarks.smoke import run_smoke


def test_churn_smoke_run(tmp_path: Path) -> None:
    paths, report = run_smoke("churn", tmp_path)
    assert sorted(path.name for path in paths) == [
        f"churn_smoke.{suffix}" for suffix in ("json", "md", "png")
    ]
    assert [r["round"] for r in report["rounds"]] == list(range(1, churn.SMOKE.rounds + 1))
    snapshots = [r["snapshot"] for r in report["rounds"]]
    assert snapshots == [r % churn.SMOKE.snapshot_every == 0 for r in range(1, 9)]
    for reading in [report["first"], *report["rounds"], report["reopened"]]:
        # The disk a file takes is never more than its size rounds up to (plus a block).
        assert 0 < reading["vector_disk_bytes"] <= reading["vector_file_bytes"] + 8192
        assert reading["rss_anon_bytes"] > 0 and reading["rss_file_bytes"] > 0
    assert all(r["search_p99_us"] >= r["search_p50_us"] > 0 for r in report["rounds"])
    assert len(report["targets"]) == 2
