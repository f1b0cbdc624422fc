"""The fine route against its peers: a smoke run of every engine, and the equal-recall choice."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from benchmarks import funnel_peers
from benchmarks.harness.runner import Progress
from tests.benchmarks.smoke import run_smoke


def test_funnel_peers_smoke_run(tmp_path: Path) -> None:
    paths, report = run_smoke("funnel_peers", tmp_path)
    assert sorted(path.name for path in paths) == [
        f"funnel_peers_smoke.{suffix}" for suffix in ("json", "md", "png")
    ]
    settings = funnel_peers.SMOKE
    names = funnel_peers.engine_names(settings)
    # Each engine measured under both mallocs, glibc's default first.
    assert [(e["engine"], e["huge_pages"]) for e in report["engines"]] == [
        (name, mode) for name in names for mode in ("off", "on")
    ]
    assert names[:5] == [
        "fractal:32-sq8-m8",
        "fractal:64-sq8",
        "fractal:64-sq8-packed",
        "fractal:64-sq8-insertion",
        "fractal:64-sq8-faiss",
    ]
    for engine in report["engines"]:
        asked = funnel_peers.HUGE_PAGE_TUNABLE in engine["glibc_tunables"]
        assert asked == (engine["huge_pages"] == "on"), engine["engine"]
    checks = [t for t in report["targets"] if t["target"].startswith("huge pages make")]
    assert len(checks) == len(funnel_peers.FLOORS)
    assert sum("(huge pages on)" in t["target"] for t in report["targets"]) == len(
        [t for t in report["targets"] if "(huge pages off)" in t["target"]]
    )
    for engine in report["engines"]:
        knobs = len(settings.ef_values) * (
            1 if engine["engine"] == "faiss_flat" else len(settings.factors)
        )
        assert len(engine["sweep"]) == knobs, engine["engine"]
        assert all(0.0 <= row["recall_at_10"] <= 1.0 for row in engine["sweep"])
        assert all(row["p99_us"] >= row["p50_us"] > 0 for row in engine["sweep"])
        assert engine["build_seconds"] > 0 and engine["disk_bytes_per_doc"] > 0
        # Qdrant maps its graph from files, which count as resident; the others hold it in RAM.
        mapped = engine["graph_file_bytes_per_doc"]
        assert mapped > 0 if engine["engine"] == "qdrant_int8" else mapped == 0, engine["engine"]
        if engine["engine"].startswith("fractal"):  # the call, and the Python around it
            assert all(r["index_p50_us"] > 0 and r["around_p50_us"] > 0 for r in engine["sweep"])
    # Fractal's own walk, over FAISS's links or packed ones, and FAISS's walk the same graph to
    # the same answers (up to rounding).
    by_name = {(e["engine"], e["huge_pages"]): e for e in report["engines"]}
    for mode in ("off", "on"):
        native = by_name["fractal:64-sq8", mode]
        for other in ("-faiss", "-packed"):
            rows = by_name[f"fractal:64-sq8{other}", mode]["sweep"]
            for ours, theirs in zip(native["sweep"], rows, strict=True):
                assert abs(ours["recall_at_10"] - theirs["recall_at_10"]) <= 0.01, (ours, theirs)
    # Every peer's widest setting finds nearly all of the true neighbours of these toy clusters
    # (3,000 points: a graph walk at efSearch 64 is close to exhaustive).
    for engine in report["engines"]:
        if not engine["engine"].startswith("fractal"):
            assert max(row["recall_at_10"] for row in engine["sweep"]) >= 0.9, engine["engine"]
    markdown = (tmp_path / "funnel_peers_smoke.md").read_text(encoding="utf-8")
    assert "## At equal recall" in markdown and "`qdrant_int8 (huge pages on)`" in markdown
    first = report["engines"][0]["sweep"][0]
    assert f"| {first['recall_at_10']:.4f} | {first['p50_us']:.0f} |" in markdown


def test_an_engine_is_represented_by_its_fastest_setting_reaching_each_floor() -> None:
    sweep = [
        {"ef": 16, "recall_at_10": 0.94, "p50_us": 10.0, "p99_us": 20.0},
        {"ef": 32, "recall_at_10": 0.96, "p50_us": 30.0, "p99_us": 50.0},
        {"ef": 48, "recall_at_10": 0.98, "p50_us": 25.0, "p99_us": 60.0},  # faster and better
        {"ef": 64, "recall_at_10": 0.985, "p50_us": 40.0, "p99_us": 70.0},
    ]
    points = funnel_peers.operating_points({"sweep": sweep})
    assert points["0.95"] == sweep[2] and points["0.97"] == sweep[2]
    assert points["0.99"] is None


def _engine(name: str, p50: float, p99: float, memory: float, graph_file: float = 0.0) -> dict:
    row = {"ef": 1, "recall_at_10": 0.995, "p50_us": p50, "p99_us": p99}
    return {
        "engine": name,
        "sweep": [row],
        "points": {str(floor): row for floor in funnel_peers.FLOORS},
        "anon_bytes_per_doc": memory,
        "file_bytes_per_doc": 500.0,  # vectors read to re-rank: not resident by need
        "graph_file_bytes_per_doc": graph_file,
    }


def test_the_targets_compare_with_the_fastest_peer_at_each_floor() -> None:
    engines = [
        _engine("fractal:192-sq8", 90.0, 150.0, 250.0),
        _engine("fractal:256-sq8", 80.0, 150.0, 300.0),  # Fractal's choice: the faster stage
        _engine("fractal:256-sq8-insertion", 70.0, 150.0, 300.0),  # a comparison, never chosen
        _engine("faiss_flat", 120.0, 140.0, 600.0),
        _engine("qdrant_int8", 100.0, 200.0, 280.0, graph_file=60.0),
    ]
    found = funnel_peers.targets(engines)
    # 80 / 100 = 0.8 of the fastest peer (qdrant), and p99 150 ≤ its 200: met.
    assert [target["met"] for target in found[:3]] == [True, True, True]
    assert found[0]["reached"].startswith("fractal:256-sq8: 0.80× qdrant_int8")
    # Resident memory: anonymous plus a graph file. Qdrant's 280 + 60 ≥ 300; a third of
    # FAISS's 600 < 300.
    assert found[3]["met"] is True and found[3]["reached"] == "300 B vs 340 B"
    assert found[4]["met"] is False and found[4]["reached"] == "300 B vs 200 B"
    assert len(found) == 5


def test_fractals_choice_is_its_fastest_stage_within_the_peers_memory_bound() -> None:
    engines = [
        _engine("fractal:256-sq8", 70.0, 150.0, 500.0),  # faster, but above both bounds
        _engine("fractal:256-sq8-packed", 85.0, 150.0, 190.0),  # within them: the choice
        _engine("faiss_flat", 120.0, 140.0, 600.0),
        _engine("qdrant_int8", 100.0, 200.0, 280.0, graph_file=60.0),
    ]
    assert funnel_peers.memory_bound(engines) == 200.0
    found = funnel_peers.targets(engines)
    assert found[0]["reached"].startswith("fractal:256-sq8-packed: 0.85× qdrant_int8")
    assert [target["met"] for target in found] == [False, False, False, True, True]
    assert found[4]["reached"] == "190 B vs 200 B"
    # With no stage within the bound, the fastest of all is the choice (and misses memory).
    over = [_engine("fractal:256-sq8", 70.0, 150.0, 500.0), *engines[2:]]
    assert funnel_peers.targets(over)[0]["reached"].startswith("fractal:256-sq8: 0.70×")
    # Nor where the stages within it reach no floor: there too the fastest of all reaching it.
    short = _engine("fractal:64-sq8-packed", 40.0, 90.0, 100.0)
    short["points"] = dict.fromkeys(short["points"])
    found = funnel_peers.targets([short, over[0], *engines[2:]])
    assert found[0]["reached"].startswith("fractal:256-sq8: 0.70×")
    assert found[3]["reached"] == "500 B vs 340 B" and not found[3]["met"]


def test_a_fractal_stage_names_its_prefix_codes_degree_node_order_walk_and_links() -> None:
    stage = funnel_peers._stage
    assert stage("fractal:192-sq8", 32, 256) == (192, "sq8", 32, True, True, False)
    assert stage("256-sq4-m16-insertion", 32, 256) == (256, "sq4", 16, False, True, False)
    assert stage("256-sq8-faiss", 32, 256) == (256, "sq8", 32, True, False, False)
    assert stage("256-sq8-m16-packed", 32, 256) == (256, "sq8", 16, True, True, True)
    both = stage("64-sq8u-m8-faiss-insertion", 32, 256)
    assert both == (64, "sq8u", 8, False, False, False)
    bad_names = ("300-sq8", "192-pq", "192-sq8-16", "192-sq8-m16-random", "sq8", "64-sq8-faiss-")
    for bad in (*bad_names, "64-sq8-packed-packed"):
        with pytest.raises(SystemExit, match="is not PREFIX-STORAGE"):
            funnel_peers._stage(bad, 32, 256)


TINY = dataclasses.replace(
    funnel_peers.SMOKE,
    documents=1_500,
    queries=10,
    dim=32,
    fractal_stages=("32-sq8",),
    engines=("fractal", "faiss_flat"),
    ef_values=(16,),
    factors=(2,),
    huge_pages=("off",),
)
"""One Fractal stage and one peer over a few documents: a run of seconds."""


def test_a_run_under_a_work_dir_reuses_its_data_and_finished_builds(tmp_path: Path) -> None:
    settings = dataclasses.replace(TINY, work_dir=tmp_path)
    quiet = Progress(enabled=False)
    first = funnel_peers.run(settings, quiet)
    (folder,) = tmp_path.iterdir()
    truth = (folder / "data" / "truth.npy").stat().st_mtime_ns
    # A build cut short leaves no record of its end: the next run builds that engine again.
    (folder / "faiss_flat" / funnel_peers.BUILT).unlink()
    second = funnel_peers.run(settings, quiet)
    assert (folder / "data" / "truth.npy").stat().st_mtime_ns == truth
    reused = {e["engine"]: e.get("build_reused", False) for e in second["engines"]}
    assert reused == {"fractal:32-sq8": True, "faiss_flat": False}
    assert second["engines"][0]["build_seconds"] == first["engines"][0]["build_seconds"]
    # Another degree is another index; other data settings are another folder.
    third = funnel_peers.run(dataclasses.replace(settings, m=8), quiet)
    assert not any(e.get("build_reused") for e in third["engines"])
    funnel_peers.run(dataclasses.replace(settings, seed=5), quiet)
    assert len(list(tmp_path.iterdir())) == 2


def test_each_build_reports_its_progress_from_its_own_process(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    funnel_peers.run(TINY, Progress(enabled=True))
    lines = capfd.readouterr().out.splitlines()
    built = [line.split(": ", 1)[1] for line in lines if " build, " in line]
    assert built == [
        "1,500 of 1,500 imported",
        "the 32-d graph, built from the vector file (one FAISS call)",
        "adding 1,500 vectors (one FAISS call)",
    ]
    said: list[str] = []
    total = 2_300_000
    for start in range(0, total, 50_000):  # batches crossing a million, then the end
        funnel_peers._every_million(said.append, start, min(start + 50_000, total), total, "x")
    assert said == [f"{done:,} of 2,300,000 x" for done in (1_000_000, 2_000_000, total)]
