"""Smoke run of the Ray embedding benchmark: its files exist, both paths ran and their outputs
are identical (no timings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmarks.smoke import run_smoke


def test_embed_ray_smoke_run(tmp_path: Path, tiny_bundle_dir: Path) -> None:
    pytest.importorskip("ray.data")
    paths, report = run_smoke("embed_ray", tmp_path, "--bundle", str(tiny_bundle_dir))
    name = "embed_ray_smoke"
    assert sorted(path.name for path in paths) == [f"{name}.{s}" for s in ("json", "md", "png")]
    assert all(path.parent == tmp_path and path.stat().st_size > 0 for path in paths)

    assert [(run["round"], run["path"]) for run in report["runs"]] == [(0, "local"), (0, "ray")]
    assert all(run["shards"] == 2 and run["texts_per_s"] > 0 for run in report["runs"])
    assert report["data"]["documents"] == 300
    assert report["identical"] is True
    assert report["ratio_ray_over_local"] > 0
    assert [target["met"] for target in report["targets"]][1] is True
    assert "load_average_1_5_15_min_at_end" in report["machine"]
