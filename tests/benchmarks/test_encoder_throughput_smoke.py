"""Smoke run of the encoder benchmark: its files exist and its numbers are sane (no timings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.encoder_throughput import FP32, SMOKE, TORCH
from tests.benchmarks.smoke import run_smoke
from tests.service.bundles import v5_bundle


@pytest.fixture(scope="module")
def v5_bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small V5 CLINC-150 bundle built for the test (the benchmark's default lives in runs/)."""
    return v5_bundle(tmp_path_factory)


def test_encoder_throughput_smoke_run(tmp_path: Path, v5_bundle_dir: Path) -> None:
    paths, report = run_smoke("encoder_throughput", tmp_path, "--bundle", str(v5_bundle_dir))
    name = "encoder_throughput_smoke"
    assert sorted(path.name for path in paths) == [f"{name}.{s}" for s in ("json", "md", "png")]
    assert all(path.parent == tmp_path and path.stat().st_size > 0 for path in paths)

    assert report["smoke"] is True
    machine = report["machine"]
    assert machine["torch_threads"] == machine["ort_intra_op_threads"] == SMOKE.threads
    assert "load_average_1_5_15_min_at_end" in machine

    encoders = list(report["encoders"])
    assert encoders[:2] == [TORCH, FP32] and any(n.startswith("ort_int8") for n in encoders)
    for rates in report["throughput_texts_per_s"].values():
        assert set(rates) == set(encoders) and all(rate > 0 for rate in rates.values())
    for latency in report["single_text_latency"].values():
        assert 0 < latency["p50_ms"] <= latency["p99_ms"]

    quality = report["quality"]
    assert set(quality) == set(encoders) - {TORCH}
    for row in quality.values():
        cosines = [value for key, value in row.items() if key.startswith("cosine")]
        assert cosines and all(-1.0 <= value <= 1.0 + 1e-6 for value in cosines)
        accuracies = [v for k, v in row.items() if k.startswith("knn_") and k != "knn_cost_points"]
        assert len(accuracies) == 2 and all(0.0 <= value <= 1.0 for value in accuracies)
    # The service's own fp32 encoder is the reference: identical to itself.
    assert quality[FP32]["cosine_min"] == pytest.approx(1.0, abs=1e-5)
    assert quality[FP32]["knn_cost_points"] == 0.0
    assert {row["encoder"] for row in report["targets"]} <= set(quality)
