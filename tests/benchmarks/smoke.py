"""Run a benchmark's smoke through the harness's entry point, as CI does."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.__main__ import main


def run_smoke(name: str, out: Path, *options: str) -> tuple[list[Path], dict]:
    """``python -m benchmarks NAME --smoke --out OUT --quiet OPTIONS``: the files it wrote and
    its JSON report, checked to carry the ``smoke`` flag and a ``targets`` list."""
    paths = main([name, "--smoke", "--out", str(out), "--quiet", *options])
    report = json.loads(paths[0].read_text(encoding="utf-8"))
    assert paths[0].suffix == ".json" and report["smoke"] is True
    assert isinstance(report["targets"], list)
    for target in report["targets"]:
        assert isinstance(target["target"], str) and isinstance(target["met"], bool), target
        assert isinstance(target["reached"], str | int | float), target
    return paths, report
