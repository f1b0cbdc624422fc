"""Smoke run of the encoder-shapes benchmark on the tiny bundle: every cell measured at both
shapes on both runtimes, the same vectors at either (no timings judged)."""

from __future__ import annotations

from pathlib import Path

from tests.benchmarks.smoke import run_smoke


def test_encoder_shapes_smoke_run(tmp_path: Path, tiny_bundle_dir: Path) -> None:
    out = tmp_path / "results"
    bundles = ("--bundle", str(tiny_bundle_dir), "--fp32-bundle", str(tiny_bundle_dir))
    paths, report = run_smoke("encoder_shapes", out, *bundles)
    name = "encoder_shapes_smoke"
    assert sorted(path.name for path in paths) == [f"{name}.{s}" for s in ("json", "md", "png")]
    cells = [(row["runtime"], row["threads"], row["max_rows"]) for row in report["rows"]]
    assert cells == [(r, 1, m) for r in ("openvino", "onnxruntime") for m in (1, 8)]
    for row in report["rows"]:
        for shape in ("exact", "bucketed"):
            assert row[shape]["texts_per_s"] > 0 and row[shape]["cpu_ms_per_text"] >= 0
        assert row["max_abs_difference"] <= 1e-5
    assert report["targets"][1]["met"]
    assert "bucketed / exact CPU" in (out / f"{name}.md").read_text(encoding="utf-8")
