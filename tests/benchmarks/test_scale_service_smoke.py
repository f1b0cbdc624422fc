"""Smoke run of the live tiered-layout benchmark: every phase and cell is there, no request
failed, and the service reports the tiered layout it was asked for (no timings asserted)."""

from __future__ import annotations

from pathlib import Path

from benchmarks import scale_service
from tests.benchmarks.smoke import run_smoke
from tests.servers import require_binary


def test_scale_service_smoke_run(tmp_path: Path, tiny_bundle_dir: Path) -> None:
    require_binary("redis-server")
    require_binary("wrk")
    paths, report = run_smoke("scale_service", tmp_path, "--bundle", str(tiny_bundle_dir))
    assert [path.name for path in paths] == [
        "scale_service_smoke.json",
        "scale_service_smoke.md",
        "scale_service_smoke.png",
    ]
    phases = report["phases"]
    assert list(phases) == ["tiered_warm", "tiered_cold", "fine_hnsw_warm", "fine_hnsw_cold"]
    connections = scale_service.SMOKE.connections
    for name, phase in phases.items():
        assert phase["documents"] == scale_service.SMOKE_DOCUMENTS
        assert phase["rss_anon_bytes_at_ready"] > 0
        routes = ["fine_hnsw"] if name.startswith("fine_hnsw") else ["coarse", "c2f"]
        routes += [] if name.endswith("warm") else [scale_service.OPENAI]
        assert [(c["route"], c["connections"]) for c in phase["cells"]] == [
            (route, c) for route in routes for c in connections
        ]
        for cell in phase["cells"]:
            assert cell["requests"] > 0 and sum(cell["errors"].values()) == 0, cell
            assert cell["service_cpu_ms"] > 0, cell
    tiered = {(i["dimension"], i["kind"]) for i in phases["tiered_warm"]["indexes"]}
    both = {(i["dimension"], i["kind"]) for i in phases["fine_hnsw_warm"]["indexes"]}
    assert len(tiered) == 1 and len(both) == 2 and tiered < both
    assert report["targets"][0]["reached"] != ""
    assert len(report["targets"]) == 3
    beyond = scale_service.beyond_openai(phases)
    assert set(beyond) == {
        (name, route, c)
        for name, route in (
            ("tiered_cold", "coarse"),
            ("tiered_cold", "c2f"),
            ("fine_hnsw_cold", "fine_hnsw"),
        )
        for c in connections
    }
    assert isinstance(report["targets"][2]["reached"], float)
