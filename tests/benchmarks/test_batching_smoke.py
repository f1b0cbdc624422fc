"""Smoke run of the batching benchmark: its files exist and its numbers are sane (no timings)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.batching import CLASSES, POLICIES, SMOKE, WORKLOADS
from tests.benchmarks.smoke import run_smoke


def test_batching_smoke_run(tmp_path: Path, identity_bundle_dir: Path) -> None:
    paths, report = run_smoke("batching", tmp_path, "--bundle", str(identity_bundle_dir))
    name = "batching_smoke"
    assert sorted(path.name for path in paths) == [f"{name}.{s}" for s in ("json", "md", "png")]
    assert all(path.parent == tmp_path and path.stat().st_size > 0 for path in paths)

    machine = report["machine"]
    assert machine["encoder_threads"] == SMOKE.threads
    for key in ("cpu_model", "cpu_simd_flags", "load_average_1_5_15_min_at_end"):
        assert key in machine
    assert [entry["order"] for entry in report["rounds"]] == [list(POLICIES)] * SMOKE.rounds

    short, paragraph = report["data"]["short"]["tokens"], report["data"]["paragraph"]["tokens"]
    assert short["mean"] < paragraph["mean"]
    assert set(report["cells"]) == set(WORKLOADS)
    for cells in report["cells"].values():
        assert set(cells) == set(POLICIES)
        for cell in cells.values():
            assert cell["texts_per_s"] > 0 and len(cell["rounds_texts_per_s"]) == SMOKE.rounds
            assert 0.0 <= cell["padded_token_share"] < 1.0
            assert 1.0 <= cell["texts_per_encoder_call"] <= SMOKE.max_batch
            assert sum(cell["latency"][kind]["requests"] for kind in CLASSES) == cell["requests"]
            for latency in cell["latency"].values():
                assert latency["requests"] == 0 or 0 < latency["p50_ms"] <= latency["p99_ms"]
    targets = [target["target"] for target in report["targets"]]
    assert len(targets) == 2 * len(WORKLOADS)
    assert all(target.split(":")[0] in WORKLOADS for target in targets)
