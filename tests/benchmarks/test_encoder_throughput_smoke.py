"""Smoke run of the encoder benchmark: its files exist and its numbers are sane (no timings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.encoder_throughput import (
    FASTEMBED,
    FP32,
    HTTP,
    PARAGRAPHS,
    RUNTIME,
    SMOKE,
    TORCH,
    UTTERANCES,
)
from benchmarks.harness.encoder_variants import fused_variant
from benchmarks.harness.wrk import has_wrk
from bundle import ENCODER_FILE
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
    budget = SMOKE.threads
    assert machine["torch_threads"] == machine["ort_intra_op_threads"] == budget
    assert machine["fastembed_threads"] == machine["service_encoder_threads"] == budget
    assert (
        "load_average_1_5_15_min_at_end" in machine and "avx512_vnni" in machine["cpu_kernel_flags"]
    )

    engines = list(report["engines"])
    variants = report["onnx_variants"]
    assert engines[:3] == [TORCH, FASTEMBED, FP32] and engines[-1] == RUNTIME
    assert variants == engines[2:-1] and any(n.startswith("ort_int8") for n in variants)
    assert report["fastembed_check"]["cosine_min"] >= SMOKE.min_fastembed_cosine

    workloads = report["data"]["workloads"]
    tokens = {name: row["tokens"]["mean"] for name, row in workloads.items()}
    assert tokens[UTTERANCES] < 20 and 40 <= tokens[PARAGRAPHS] <= 60
    assert set(report["throughput_texts_per_s"]) == {UTTERANCES, PARAGRAPHS}
    for by_size in report["throughput_texts_per_s"].values():
        assert list(by_size) == [str(size) for size in SMOKE.batch_sizes]
        for rates in by_size.values():
            assert set(rates) == set(engines) and all(rate > 0 for rate in rates.values())
    for by_size in report["service_runtime"]["texts_per_encode_call"].values():
        assert all(
            1.0 <= texts <= report["service_runtime"]["settings"]["max_batch_size"]
            for texts in by_size.values()
        )
    assert (
        set(report["single_text_latency"]) == set(engines) == set(report["idle_cpu_ms_after_call"])
    )
    for latency in report["single_text_latency"].values():
        assert 0 < latency["p50_ms"] <= latency["p99_ms"]

    http = report["http"]
    if has_wrk():
        cells = {(row["workload"], row["concurrency"]) for row in http["rows"]}
        assert cells == {(w, c) for w in (UTTERANCES, PARAGRAPHS) for c in SMOKE.http_concurrency}
        assert all(
            row["texts_per_s"] > 0 and sum(row["errors"].values()) == 0 for row in http["rows"]
        )
    else:
        assert "wrk" in http["skipped"]

    quality = report["quality"]
    assert list(quality) == variants
    for row in quality.values():
        cosines = [value for key, value in row.items() if key.startswith("cosine")]
        assert cosines and all(-1.0 <= value <= 1.0 + 1e-6 for value in cosines)
        accuracies = [v for k, v in row.items() if k.startswith("knn_") and k != "knn_cost_points"]
        assert len(accuracies) == 2 and all(0.0 <= value <= 1.0 for value in accuracies)
    # The service's own fp32 encoder is the reference: identical to itself.
    assert quality[FP32]["cosine_min"] == pytest.approx(1.0, abs=1e-5)
    assert quality[FP32]["knn_cost_points"] == 0.0
    assert {row["encoder"] for row in report["targets"]} == set(variants) | {HTTP}


def test_fused_variant_writes_only_its_folder(
    tmp_path: Path, v5_bundle_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fused variant is written to its own folder and nothing to the working directory (on
    MiniLM the optimiser's shape inference stops short and saves a 90 MB partial graph there;
    this tiny bundle's does not, so here the check is that the scratch directory costs nothing)."""
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    fusions = fused_variant(v5_bundle_dir, tmp_path / "fused")
    assert fusions and all(count > 0 for count in fusions.values())
    assert (tmp_path / "fused" / ENCODER_FILE).stat().st_size > 0
    assert list(workdir.iterdir()) == []
