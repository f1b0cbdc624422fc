"""Smoke run of the routes benchmark: tiny Pareto and seeds, the live service, the auto scorer."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.routes import ALPHAS, SMOKE
from tests.benchmarks.smoke import run_smoke
from tests.service.bundles import v5_bundle


def test_routes_smoke_run(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    bundle = str(v5_bundle(tmp_path_factory))
    paths, record = run_smoke("routes", tmp_path, "--bundle", bundle)
    assert [row["name"] for row in record["pareto"]] == list(SMOKE.pareto)
    for row in record["pareto"]:
        assert -1.0 <= row["s"] <= 1.0 and 0.0 <= row["c2f_recall_at_shortlist"] <= 1.0
        assert row["shortlist_dim"] in (64, 128, 192, 256)
    defaults = record["defaults"]
    assert [len(runs) for runs in defaults["runs"].values()] == [len(SMOKE.seeds)] * 2
    assert [row["alpha"] for row in defaults["workload"]] == list(ALPHAS)
    # At α = 0 every route answers fine queries at 256-d: V5-adaptive and V5-256 agree.
    first = defaults["workload"][0]
    assert first["v5_adaptive"] == pytest.approx(first["v5_256"])
    live = record["live_c2f"]
    assert (live["documents"], live["queries"]) == (SMOKE.documents, SMOKE.max_test)
    assert live["shortlist_k"] == 40 and live["shortlist_dim"] == live["info_shortlist_dim"]
    assert 0.0 <= live["recall_at_coarse"] <= 1.0 and 0.0 <= live["recall_at_shortlist"] <= 1.0
    (auto,) = record["auto"]
    for policies in auto["workloads"].values():
        assert policies["always_coarse"]["coarse_recall"] == 1.0
        assert policies["oracle"]["accuracy"] == 1.0
    assert "Every route earns its keep" in paths[1].read_text(encoding="utf-8")
    assert paths[-1].suffix == ".png" and paths[-1].stat().st_size > 0
