"""The service-settings benchmark: a smoke run against real service processes (no timings)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from benchmarks import service_settings
from benchmarks.harness.wrk import has_wrk
from benchmarks.service_settings import SMOKE, VARIANTS, onnxruntime_int8_bundle
from tests.benchmarks.smoke import run_smoke
from tests.service.bundles import v5_bundle


def test_service_settings_smoke_run(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    out = tmp_path / "results"
    paths, _ = run_smoke("service_settings", out, "--bundle", str(v5_bundle(tmp_path_factory)))
    assert sorted(path.name for path in paths) == [
        f"service_settings_smoke.{suffix}" for suffix in ("json", "md", "png")
    ]
    report = json.loads((out / "service_settings_smoke.json").read_text(encoding="utf-8"))

    int8 = report["bundles"]["int8"]["quantization"]
    assert report["bundles"]["fp32"]["quantization"] is None
    assert int8["weight_type"] == "QInt8" and int8["per_channel"] is True
    assert 0.9 <= int8["cosine_to_fp32"]["mean"] <= 1.0
    # Every variant ran with the settings it names that /info reports.
    for variant in report["variants"]:
        settings = dict(variant["settings"])
        assert variant["encoder"]["spin"] is (settings.get("encoder_spin") == "true")
        assert variant["limits"]["max_wait_ms"] == float(settings.get("max_wait_ms", 0))
        if "encoder_threads" in settings:
            assert variant["encoder"]["threads"] == int(settings["encoder_threads"])
    assert report["generator"] == ("wrk" if has_wrk() else "python")
    cells = {(row["variant"], row["concurrency"]) for row in report["summary"]}
    assert cells == {(v.name, c) for v in VARIANTS for c in SMOKE.concurrency}
    for row in report["summary"]:
        assert row["failed"] == 0 and row["requests"] > 0, row
        assert 0 < row["p50_ms"] <= row["p99_ms"]
        # The service's own means over the cell, from /metrics: every request encodes a query
        # and searches the index.
        assert row["encode_call_ms"] > 0 and row["search_ms"] > 0, row
        assert row["texts_per_encode_call"] >= 1, row
    baseline = [r for r in report["summary"] if r["variant"] == service_settings.BASELINE]
    assert all(row["qps_vs_baseline"] == 1.0 for row in baseline)


def test_int8_bundle_option_refuses_a_bundle_without_onnxruntime_int8(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="not quantised.*onnxruntime-int8"):
        onnxruntime_int8_bundle(str(v5_bundle(tmp_path_factory)))
