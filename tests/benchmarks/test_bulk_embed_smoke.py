"""Smoke run of the bulk embedding benchmark: the fp32 bundle and its fast twin both embed the
paragraphs, and the twin's vectors are close to the fp32 ones (no timings)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.benchmarks.smoke import run_smoke
from training.data.registry import load_dataset
from training.quantize import quantize_bundle


def test_bulk_embed_smoke_run(tmp_path: Path, tiny_bundle_dir: Path) -> None:
    pytest.importorskip("pyarrow")
    twin = tmp_path / "twin"
    data = load_dataset("clinc150", max_train=60, max_test=20)
    quantize_bundle(tiny_bundle_dir, twin, data, max_knn_cost_points=math.inf)
    out = tmp_path / "results"
    options = ("--bundle", str(tiny_bundle_dir), "--twin", str(twin))
    paths, report = run_smoke("bulk_embed", out, *options)
    name = "bulk_embed_smoke"
    assert sorted(path.name for path in paths) == [f"{name}.{s}" for s in ("json", "md", "png")]

    assert [(run["round"], run["encoder"]) for run in report["runs"]] == [(0, "fp32"), (0, "twin")]
    assert all(run["documents_per_s"] > 0 for run in report["runs"])
    assert report["data"]["documents"] == 200
    assert report["twin_runtime"] == "openvino"
    assert report["twin_recipe"]["runtime"] == "openvino"
    assert 0.9 < report["cosine_twin_to_fp32"]["mean"] <= 1.0
    assert report["ratio_twin_over_fp32"] > 0
    assert "twin" in (out / f"{name}.md").read_text(encoding="utf-8")
