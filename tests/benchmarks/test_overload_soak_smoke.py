"""Smoke runs of the overload and soak benchmarks against the real service (no timings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import overload, soak
from tests.benchmarks.smoke import run_smoke
from tests.servers import require_binary
from tests.service.bundles import v5_bundle


def test_overload_smoke_run(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    require_binary("wrk")
    require_binary("hey")
    bundle = str(v5_bundle(tmp_path_factory))
    # A short encoder queue, so that the service sheds some of 3× its capacity.
    paths, report = run_smoke(
        "overload", tmp_path, "--bundle", bundle, "--service", "queue_depth=128"
    )
    assert [path.name for path in paths] == [
        f"overload_smoke.{suffix}" for suffix in ("json", "md", "png")
    ]
    assert report["service"]["queue_depth"] == "128"
    assert list(report["endpoints"]) == ["embed", "search"]
    for measured in report["endpoints"].values():
        assert measured["capacity"]["ok_qps"] > 0
        assert measured["unloaded"]["answered"]["200"]["count"] > 0
        steps = measured["steps"]
        assert [step["multiple"] for step in steps] == list(overload.SMOKE.multiples)
        for step in steps:
            assert step["accepted"] > 0 and step["rss_samples"], step
            assert (
                step["accepted"] + step["shed_429"] + step["transport_errors"] <= step["requests"]
            )
    assert len(report["targets"]) == 5 * 2 + 2  # and the storm's and the ingest flood's
    assert sum(report["storm"]["statuses"].values()) > 0
    flood = report["flood"]
    assert flood["ingest_documents_per_s"] > 0 and flood["flooded"]["requests"] > 0


def test_soak_smoke_run(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    require_binary("wrk")
    require_binary("hey")
    bundle = str(v5_bundle(tmp_path_factory))
    paths, report = run_smoke("soak", tmp_path, "--bundle", bundle)
    assert [path.name for path in paths] == [
        f"soak_smoke.{suffix}" for suffix in ("json", "md", "png")
    ]
    assert set(report["capacity"]) == set(soak.MIX)
    assert [row["minute"] for row in report["minutes"]] == list(range(soak.SMOKE.minutes))
    for row in report["minutes"]:
        assert row["requests"] > 0 and row["rss_bytes"] > 0
        assert set(row["workloads"]) == set(soak.MIX)
    assert sum(report["ingest"]["posted_by_minute"].values()) > 0
    assert len(report["targets"]) == 3
