"""The filters benchmark's smoke run (toy vectors, 20K documents) and the brute force its recall
rests on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import faiss
import numpy as np
import pytest

from benchmarks import filters
from tests.benchmarks.smoke import run_smoke


@pytest.fixture(autouse=True)
def restore_faiss_threads() -> Iterator[None]:
    before = faiss.omp_get_max_threads()
    yield
    faiss.omp_set_num_threads(before)


def test_filters_smoke_run(tmp_path: Path) -> None:
    paths, report = run_smoke("filters", tmp_path)
    assert sorted(path.name for path in paths) == [
        f"filters_smoke.{suffix}" for suffix in ("json", "md", "png")
    ]
    rows = report["rows"]
    expected = {
        (route, kind, storage)
        for storage, routes in filters.LAYOUTS.items()
        for route, kinds in routes.items()
        for kind in kinds
    }
    assert {(row["route"], row["kind"], row["storage"]) for row in rows} == expected
    assert len(rows) == len(expected) * (1 + len(filters.SELECTIVITIES))
    for row in rows:
        assert 0.0 <= row["recall_exact"] <= 1.0 and 0.0 <= row["recall"] <= 1.0, row
        assert row["index_p50_us"] > 0 and row["call_p50_us"] >= row["index_p50_us"] * 0.5
        if row["selectivity"] == filters.UNFILTERED:
            assert row["paths"] == []
            continue
        assert row["k_hits_fraction"] == 1.0, row
        assert row["paths"] in (["exact_subset"], ["selector"], ["scan"]), row
        if row["paths"] == ["exact_subset"]:  # exact scores of every match: nothing missed
            assert row["recall"] == row["recall_exact"] == 1.0, row
    # The policy at this N: the selector at 50%, the exact subset from 10% down.
    paths = {
        row["selectivity"]: row["paths"]
        for row in rows
        if (row["route"], row["kind"]) == ("coarse", "hnsw")
    }
    assert paths[0.5] == ["selector"] and paths[0.1] == ["exact_subset"]
    assert len(report["crossover"]) == 2 * 2 * len(filters.SELECTIVITIES) * len(filters.FORCED)
    for row in report["crossover"]:
        assert row["paths"] == [row["mode"]], row
        assert row["k_hits_fraction"] == 1.0
    assert {entry["floor"] for entry in report["equal_recall"]} == set(filters.EQUAL_RECALL_FLOORS)
    assert [row["matching"] for row in report["resolve"]] == [10_000, 2_000, 200, 20]
    assert len(report["targets"]) == len(filters.SELECTIVITIES) + 1 + 4
    markdown = (tmp_path / "filters_smoke.md").read_text(encoding="utf-8")
    assert "## Both paths forced (the crossover)" in markdown


def test_the_streamed_brute_force_is_exact_filtered_search() -> None:
    rng = np.random.default_rng(0)
    base = rng.standard_normal((3000, 8)).astype(np.float32)
    queries = rng.standard_normal((5, 8)).astype(np.float32)
    bucket = rng.permutation(3000) % filters.BUCKETS
    topk = filters.FilteredTopK(queries, 4, filters.EVERY)
    rows = np.arange(1, 3001)
    for start in range(0, 3000, 700):
        part = slice(start, start + 700)
        topk.add(base[part], rows[part], bucket[part])
    for selectivity in filters.EVERY:
        keep = np.flatnonzero(bucket < round(selectivity * filters.BUCKETS))
        expected = keep[np.argsort(-(queries @ base[keep].T), axis=1)[:, :4]] + 1
        found = min(4, len(keep))  # 3 rows match at 0.1%: the fourth place stays empty (-1)
        np.testing.assert_array_equal(topk.rows[selectivity][:, :found], expected)
        assert (topk.rows[selectivity][:, found:] == -1).all()
    assert filters.recall(np.array([[3, 1, 0]]), np.array([[1, 2, -1]])) == 0.5
