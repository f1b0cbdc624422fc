"""Smoke run of the MSHC-over-HTTP benchmark on the small test bundle: a real service process,
every route answered, the PQ index built from the bundle's codebooks."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import mshc_service
from tests.benchmarks.smoke import run_smoke
from tests.service.bundles import mshc_bundle


def test_mshc_service_smoke_run(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    bundle = str(mshc_bundle(tmp_path_factory))
    options = ("--bundle", bundle, "--documents", "300", "--queries", "30")
    paths, record = run_smoke("mshc_service", tmp_path, *options)
    assert record["documents"] == 300 and record["queries"] == 30
    rows = {row["search"]: row for row in record["rows"]}
    assert list(rows) == list(mshc_service.ROUTES)
    assert rows["exact 384-d"]["recall_at_10_vs_exact_384"] == 1.0
    assert all(0.0 <= row["mrr_at_10"] <= 1.0 for row in rows.values())
    c2f = rows[list(mshc_service.ROUTES)[-1]]["route"]
    assert c2f["rerank"] == "c2f" and c2f["shortlist_k"] == 10 * mshc_service.C2F_FACTOR
    indexes = {(i["dimension"], i["kind"]): i for i in record["indexes"]}
    assert indexes[(96, "pq")]["bytes_per_vector"] == 8
    assert indexes[(96, "pq")]["codebooks"] == "bundle"
    assert "| pq 96-d (8 B) |" in paths[1].read_text(encoding="utf-8")
