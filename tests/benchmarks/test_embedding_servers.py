"""The embedding-server comparison's cells, ratios and target, and Infinity itself where it is
installed (its own environment: ``benchmarks/harness/infinity_server.py``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from benchmarks.harness.embedding_servers import Cell, over_infinity, side_by_side, target
from benchmarks.harness.infinity_server import (
    CHECK_TEXTS,
    ENGINES,
    MIN_COSINE,
    InfinityModel,
    infinity_binary,
    start_infinity,
)
from benchmarks.harness.processes import MissingBinary
from benchmarks.harness.runner import Progress
from benchmarks.http_load import SMOKE
from tests.service.bundles import v5_bundle


def _row(server: str, precision: str, texts: int, connections: int, qps: float) -> dict:
    return {
        "server": server,
        "precision": precision,
        "texts": texts,
        "connections": connections,
        "qps": qps,
    }


def test_cells_parse_and_bad_ones_are_refused() -> None:
    assert Cell.parse("32x4") == Cell(32, 4)
    for bad in ("32", "ax4", "0x4", "4x-1"):
        with pytest.raises(SystemExit, match="--embedding-cells"):
            Cell.parse(bad)


def test_ratios_and_target_read_each_cell() -> None:
    rows = [
        _row("Fractal int8", "int8", 1, 8, 600.0),
        _row("Fractal fp32", "fp32", 1, 8, 300.0),
        _row("Infinity optimum", "fp32", 1, 8, 100.0),
        _row("Fractal int8", "int8", 32, 4, 60.0),
        _row("Fractal fp32", "fp32", 32, 4, 15.0),
        _row("Infinity optimum", "fp32", 32, 4, 10.0),
    ]
    report = {
        "rows": rows,
        "infinity": {"measured": True, "engines": ["optimum"]},
        "over_infinity": {p: over_infinity(rows, p) for p in ("fp32", "int8")},
    }
    assert report["over_infinity"] == {
        "fp32": {"1x8": 3.0, "32x4": 1.5},
        "int8": {"1x8": 6.0, "32x4": 6.0},
    }
    settings = replace(SMOKE, embedding_cells=("1x8", "32x4"))
    missed = target(report, settings)
    assert missed["reached"] == 1.5 and missed["met"] is False
    assert target(report, replace(settings, target_over_infinity=1.5))["met"] is True
    # A cell Infinity did not answer cannot be met.
    three = replace(settings, embedding_cells=("1x1", "1x8", "32x4"), target_over_infinity=1.0)
    assert target(report, three)["met"] is False


@pytest.mark.parametrize("engine", ENGINES)
def test_infinity_serves_the_models_embeddings(tmp_path: Path, engine: str) -> None:
    try:
        binary = infinity_binary(None)
    except MissingBinary as error:
        pytest.skip(str(error))
    model = InfinityModel.prepare(tmp_path)
    server = start_infinity(binary, model, engine, tmp_path, batch_size=8)
    try:
        got = server.embed(list(CHECK_TEXTS))
        assert np.min(np.sum(got * model.reference, axis=1)) >= MIN_COSINE
    finally:
        server.stop()


def test_an_fp32_bundle_beside_an_fp32_served_one_is_refused(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    bundle = v5_bundle(tmp_path_factory)  # fp32: no quantization in its manifest
    settings = replace(SMOKE, bundle=bundle, fp32_bundle=bundle)
    with pytest.raises(SystemExit, match="is fp32 already"):
        side_by_side(settings, ["a"], "wrk", tmp_path, Progress(enabled=False))
