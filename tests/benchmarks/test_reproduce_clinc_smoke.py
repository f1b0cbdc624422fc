"""Smoke run of the CLINC-150 reproduction: its files exist and its tables are complete."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.reproduce_clinc import ABLATIONS, SMOKE
from tests.benchmarks.smoke import run_smoke


@pytest.mark.slow
def test_reproduce_clinc_smoke_run(tmp_path: Path) -> None:
    paths, record = run_smoke("reproduce_clinc", tmp_path)
    assert [path.name for path in paths] == [
        "clinc150_reproduction_smoke.json", "clinc150_reproduction_smoke.md",
    ]
    assert (tmp_path / "clinc150_smoke" / "report.md").is_file()
    assert (tmp_path / "clinc150_3level_smoke" / "report.md").is_file()
    assert record["seeds"] == list(SMOKE.seeds)
    assert set(record["methods"]) == {"raw", "v5", "mrl", *ABLATIONS, "v5-paper", "mrl-paper"}
    assert set(record["three_level"]) == {"raw", "v5", "mrl"}
    assert len(record["targets"]) == 10
    assert "## Three levels" in paths[1].read_text(encoding="utf-8")
