"""Smoke run of the cache benchmark: its files exist and its counts meet the targets (no
timings are asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import cache_load
from tests.benchmarks.smoke import run_smoke
from tests.servers import require_binary
from tests.service.bundles import identity_bundle


def test_cache_load_smoke_run(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    require_binary("redis-server")
    bundle = identity_bundle(tmp_path_factory)
    run_smoke("cache_load", tmp_path, "--bundle", str(bundle), "--workers", "4")
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "cache_load_smoke.json",
        "cache_load_smoke.md",
    ]
    record = json.loads((tmp_path / "cache_load_smoke.json").read_text(encoding="utf-8"))
    cold, warm, outage = record["cold"], record["warm"], record["outage"]
    assert cold["failed"] == warm["failed"] == outage["failed"] == 0
    assert cold["texts_encoded"] == cache_load.SMOKE.queries
    assert warm["hit_rate"] >= 0.99 and warm["texts_encoded"] == 0
    assert warm["encoder_calls_skipped"] == warm["requests"] == 2 * cache_load.SMOKE.queries
    assert outage["requests"] == 3 * cache_load.SMOKE.queries and outage["redis_errors"] > 0
    assert outage["hits_resumed"] is True
