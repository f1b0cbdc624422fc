"""Smoke runs of the search benchmarks and the equal-recall comparison they rest on."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import faiss
import numpy as np
import pytest

from benchmarks import c2f_sfs_pq, index_latency
from benchmarks.harness.search_measure import (
    exact_neighbours,
    fastest_reaching,
    first_reaching,
    frontier,
)
from tests.benchmarks.smoke import run_smoke


@pytest.fixture(autouse=True)
def restore_faiss_threads() -> Iterator[None]:
    """The benchmarks set FAISS's thread count for the whole process; put it back."""
    before = faiss.omp_get_max_threads()
    yield
    faiss.omp_set_num_threads(before)


def _recalls(value: object) -> Iterator[float]:
    """Every number stored under a key that starts with ``recall`` or ends with ``_recall``."""
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, float) and (key.startswith("recall") or key.endswith("_recall")):
                yield item
            else:
                yield from _recalls(item)
    elif isinstance(value, list):
        for item in value:
            yield from _recalls(item)


def _check_outputs(paths: list[Path], name: str, tmp_path: Path) -> dict:
    assert sorted(path.name for path in paths) == sorted(
        f"{name}.{suffix}" for suffix in ("json", "md", "png")
    )
    assert all(path.parent == tmp_path and path.stat().st_size > 0 for path in paths)
    report = json.loads((tmp_path / f"{name}.json").read_text(encoding="utf-8"))
    recalls = list(_recalls(report))
    assert recalls and all(0.0 <= recall <= 1.0 for recall in recalls)
    assert report["smoke"] is True
    assert report["machine"]["faiss_threads"] == 1
    assert "load_average_1_5_15_min_at_end" in report["machine"]
    return report


def test_index_latency_smoke_run(tmp_path: Path) -> None:
    paths, _ = run_smoke("index_latency", tmp_path)
    report = _check_outputs(paths, "index_latency_smoke", tmp_path)
    settings = index_latency.SMOKE
    assert len(report["hnsw"]) == len(settings.dims) * len(settings.ef_values)
    assert [row["dim"] for row in report["hnsw_speedup_at_recall"]] == list(settings.dims)
    assert {row["set"] for row in report["synthetic_check"]["rows"]} == set(
        report["synthetic_check"]["sets"]
    )
    # The flat index is exact search itself.
    assert all(row["recall_at_10"] == pytest.approx(1.0) for row in report["flat"])
    markdown = (tmp_path / "index_latency_smoke.md").read_text(encoding="utf-8")
    assert "against 256-d HNSW at equal recall" in markdown


def test_c2f_sfs_pq_smoke_run(tmp_path: Path) -> None:
    paths, _ = run_smoke("c2f_sfs_pq", tmp_path)
    report = _check_outputs(paths, "c2f_sfs_pq_smoke", tmp_path)
    for dataset in report["datasets"]:
        paths_seen = {row["path"] for row in dataset["rows"]}
        assert paths_seen == {"collection", "raw"}
        flat = [
            row
            for row in dataset["rows"]
            if row["search"] == "plain" and row["kind"] == "exact" and row["dim"] == 256
        ]
        assert all(row["recall_at_10"] == pytest.approx(1.0) for row in flat)
        assert {entry["kind"] for entry in dataset["verdicts"]["sfs"]} == {"exact", "hnsw"}
        assert set(dataset["verdicts"]["c2f"]) == {"exact", "hnsw"}


SWEEP = [
    {
        "dim": 64,
        "ef_search": 16,
        "recall_at_10": 0.90,
        "p50_us": 20.0,
        "p99_us": 40.0,
        "batch_qps": 900.0,
    },
    {
        "dim": 64,
        "ef_search": 32,
        "recall_at_10": 0.96,
        "p50_us": 30.0,
        "p99_us": 50.0,
        "batch_qps": 800.0,
    },
    {
        "dim": 64,
        "ef_search": 64,
        "recall_at_10": 0.99,
        "p50_us": 45.0,
        "p99_us": 70.0,
        "batch_qps": 600.0,
    },
    {
        "dim": 256,
        "ef_search": 16,
        "recall_at_10": 0.80,
        "p50_us": 60.0,
        "p99_us": 90.0,
        "batch_qps": 300.0,
    },
    {
        "dim": 256,
        "ef_search": 64,
        "recall_at_10": 0.94,
        "p50_us": 100.0,
        "p99_us": 150.0,
        "batch_qps": 200.0,
    },
    {
        "dim": 256,
        "ef_search": 128,
        "recall_at_10": 0.97,
        "p50_us": 150.0,
        "p99_us": 200.0,
        "batch_qps": 100.0,
    },
]


def test_exact_neighbours_in_blocks_match_one_search_of_the_whole_base() -> None:
    rng = np.random.default_rng(3)
    base = rng.standard_normal((2_003, 16)).astype(np.float32)
    queries = rng.standard_normal((30, 16)).astype(np.float32)
    whole = faiss.IndexFlatIP(16)
    whole.add(base)
    expected = whole.search(queries, 10)[1]
    for block in (7, 500, 2_003, 10_000):  # blocks smaller than k, uneven, exact, larger
        assert (exact_neighbours(base, queries, 10, block=block) == expected).all(), block


def test_first_reaching_takes_the_smallest_setting_at_or_above_the_target() -> None:
    rows_64 = [row for row in SWEEP if row["dim"] == 64]
    assert first_reaching(rows_64, 0.95, "ef_search")["ef_search"] == 32
    assert first_reaching(rows_64, 0.99, "ef_search")["ef_search"] == 64  # equal counts
    assert first_reaching(list(reversed(rows_64)), 0.95, "ef_search")["ef_search"] == 32
    assert first_reaching(rows_64, 0.995, "ef_search") is None


GRID = [  # two knobs: a longer shortlist from a shallower walk can be the faster way to a recall
    {"factor": 1, "ef": 64, "p50_us": 90.0, "recall_at_10": 0.93},
    {"factor": 1, "ef": 128, "p50_us": 150.0, "recall_at_10": 0.96},
    {"factor": 2, "ef": 32, "p50_us": 80.0, "recall_at_10": 0.95},
    {"factor": 2, "ef": 64, "p50_us": 110.0, "recall_at_10": 0.97},
    {"factor": 4, "ef": 40, "p50_us": 120.0, "recall_at_10": 0.965},
]


def test_fastest_reaching_is_the_lowest_time_at_or_above_the_target_whatever_the_knobs() -> None:
    assert fastest_reaching(GRID, 0.95) == GRID[2]
    assert fastest_reaching(GRID, 0.96) == GRID[3]  # not the smallest factor reaching it
    assert fastest_reaching(list(reversed(GRID)), 0.96) == GRID[3]
    assert fastest_reaching(GRID, 0.98) is None


def test_the_frontier_keeps_each_row_no_faster_row_matches_in_recall() -> None:
    assert frontier(GRID) == [GRID[2], GRID[3]]
    assert frontier(GRID + [{"p50_us": 200.0, "recall_at_10": 0.99}])[-1]["recall_at_10"] == 0.99
    assert frontier([]) == []


def test_speedup_compares_each_dimension_at_its_first_setting_reaching_the_target() -> None:
    entries = {entry["dim"]: entry for entry in index_latency.speedups(SWEEP, (64, 256), 0.95)}
    # 64-d at ef 32 (not ef 16, recall 0.90) against 256-d at ef 128 (not ef 64, recall 0.94).
    assert entries[64]["ef_search"] == 32 and entries[256]["ef_search"] == 128
    assert entries[64]["speedup_p50"] == pytest.approx(150.0 / 30.0)
    assert entries[64]["speedup_batch"] == pytest.approx(800.0 / 100.0)
    assert entries[256]["speedup_p50"] == pytest.approx(1.0)
    unreached = index_latency.speedups(SWEEP, (64, 256), 0.98)
    assert unreached[0]["reached"] and not unreached[1]["reached"]
    assert "speedup_p50" not in unreached[0]


def _row(path: str, search: str, kind: str, dim: int, recall: float, p50: float, **extra) -> dict:
    if "factor" in extra:
        extra["shortlist"] = 10 * extra["factor"]
    return {
        "path": path,
        "search": search,
        "scoring": extra.pop("scoring", "cosine"),
        "kind": kind,
        "dim": dim,
        "recall_at_10": recall,
        "p50_us": p50,
        "batch_qps": 1e6 / p50,
        **extra,
    }


def test_c2f_verdicts_compare_at_the_recall_target() -> None:
    rows = [
        _row("collection", "plain", "exact", 256, 1.0, 1000.0),
        _row("collection", "plain", "hnsw", 256, 0.985, 300.0, ef_search=128),
        _row("raw", "plain", "hnsw", 256, 0.98, 150.0, ef_search=64),
        _row("raw", "plain", "hnsw", 256, 0.992, 250.0, ef_search=128),
        _row("raw", "plain", "hnsw", 256, 0.999, 400.0, ef_search=256),
        _row("collection", "c2f", "exact", 64, 0.9, 200.0, factor=4),
        _row("collection", "c2f", "exact", 64, 0.999, 500.0, factor=64),
        _row("collection", "c2f", "exact", 64, 0.991, 300.0, factor=16),
        _row("collection", "c2f", "hnsw", 64, 0.85, 150.0, factor=4),
        _row("collection", "c2f", "hnsw", 64, 0.95, 250.0, factor=16),
    ]
    for kind in ("exact", "hnsw"):
        for dim in (64, 256):
            rows.append(_row("collection", "plain", kind, dim, 1.0, 100.0, scoring="sfs"))
            if dim == 64:
                rows.append(_row("collection", "plain", kind, dim, 1.0, 95.0))
    verdict = c2f_sfs_pq.verdicts(rows, c2f_sfs_pq.Settings())
    assert verdict["hnsw_at_target"]["collection"] is None  # 0.985 < 0.99
    assert verdict["hnsw_at_target"]["raw"]["ef_search"] == 128
    flat_c2f = verdict["c2f"]["exact"]
    assert flat_c2f["factor"] == 16
    assert flat_c2f["speedup_vs_flat"] == pytest.approx(1000.0 / 300.0)
    assert flat_c2f["target_3x_met"]
    assert flat_c2f["time_vs_hnsw"] == {"raw": pytest.approx(300.0 / 250.0)}
    assert flat_c2f["not_slower_than_hnsw"] is False
    assert verdict["c2f"]["hnsw"] == {"reached": False, "best_recall": 0.95, "best_factor": 16}
    sfs = {(entry["kind"], entry["dim"]): entry for entry in verdict["sfs"]}
    assert sfs["exact", 256]["p50_ratio"] == pytest.approx(100.0 / 1000.0)
    assert sfs["hnsw", 64]["p50_ratio"] == pytest.approx(100.0 / 95.0)
    assert sfs["hnsw", 64]["target_met"]
    floors = {(entry["method"], entry["floor"]): entry for entry in verdict["at_recall_floors"]}
    assert floors["C2F flat-64 → 256", 0.9]["setting"] == "k′ = 40"  # recall 0.9 counts
    assert floors["C2F flat-64 → 256", 0.95]["setting"] == "k′ = 160"
    assert floors["C2F flat-64 → 256", 0.95]["speedup_vs_flat"] == pytest.approx(1000.0 / 300.0)
    assert floors["HNSW-256 (raw)", 0.95]["setting"] == "ef 64"
    assert floors["HNSW-256 (raw)", 0.99]["setting"] == "ef 128"
    assert not floors["C2F HNSW-64 → 256", 0.99]["reached"]
