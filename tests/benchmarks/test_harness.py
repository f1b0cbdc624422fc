"""The benchmark harness: listing, options, result names and the results files (no benchmark
is measured here)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType

import pytest

import benchmarks
from benchmarks import BENCHMARKS
from benchmarks.__main__ import main
from benchmarks.harness.runner import (
    Progress,
    benchmark_parser,
    int_list,
    option,
    run_benchmark,
    settings_from,
)


@dataclass(frozen=True)
class Settings:
    size: int = option(100, "how many")
    tag: str = option("", "added to the file names")
    seeds: tuple[int, ...] = option((1,), "seeds")
    fixed: int = 5


def _fake(targets: object = None) -> ModuleType:
    """A benchmark module with options, a results name, a renderer and no plot."""
    module = ModuleType("benchmarks.fake", "A fake benchmark.\n\nIt measures nothing.")
    module.Settings = Settings
    module.SMOKE = Settings(size=3)

    def run(settings: Settings, progress: object) -> dict:
        found = [{"target": "size ≥ 3", "reached": settings.size, "met": settings.size >= 3}]
        return {**asdict(settings), "targets": found if targets is None else targets}

    module.run = run
    module.markdown = lambda report: f"# Fake ({report['size']}, smoke {report['smoke']})"
    module.results_name = lambda settings: "fake" + (f"_{settings.tag}" if settings.tag else "")
    return module


def _run(module: ModuleType, tmp_path: Path, *options: str) -> list[Path]:
    args = benchmark_parser("fake", module).parse_args(["--out", str(tmp_path), *options])
    return run_benchmark(
        "fake", module, settings_from(module, args), smoke=args.smoke, out=args.out,
        quiet=True, command="test",
    )


def test_list_names_every_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list"]) == []
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == list(BENCHMARKS)
    folder = Path(benchmarks.__file__).parent
    modules = {path.stem for path in folder.glob("*.py")} - {"__init__", "__main__"}
    assert modules == set(BENCHMARKS), "helpers live in benchmarks/harness/, not beside these"


def test_an_unknown_benchmark_is_refused_with_the_list() -> None:
    with pytest.raises(SystemExit, match="unknown benchmark 'nope'.*http_load"):
        main(["nope"])


def test_smoke_run_writes_json_and_markdown_with_machine_smoke_and_targets(
    tmp_path: Path,
) -> None:
    paths = _run(_fake(), tmp_path, "--smoke", "--tag", "x")
    assert [path.name for path in paths] == ["fake_x_smoke.json", "fake_x_smoke.md"]
    report = json.loads(paths[0].read_text(encoding="utf-8"))
    assert report["smoke"] is True and report["size"] == 3 and report["command"] == "test"
    assert report["targets"] == [{"target": "size ≥ 3", "reached": 3, "met": True}]
    machine = report["machine"]
    for key in ("cpu_model", "cpu_simd_flags", "cpu_cores", "python", "numpy"):
        assert key in machine
    assert len(machine["load_average_1_5_15_min_at_start"]) == 3
    assert len(machine["load_average_1_5_15_min_at_end"]) == 3
    assert paths[1].read_text(encoding="utf-8") == "# Fake (3, smoke True)\n"


def test_given_options_override_the_settings(tmp_path: Path) -> None:
    paths = _run(_fake(), tmp_path, "--size", "7", "--seeds", "4,5")
    assert paths[0].name == "fake.json"
    report = json.loads(paths[0].read_text(encoding="utf-8"))
    assert (report["size"], report["seeds"], report["fixed"]) == (7, [4, 5], 5)


def test_only_option_fields_are_options() -> None:
    with pytest.raises(SystemExit):
        benchmark_parser("fake", _fake()).parse_args(["--fixed", "3"])


def test_results_without_a_targets_list_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="must be a list"):
        _run(_fake(targets={"size": 3}), tmp_path)
    with pytest.raises(TypeError, match="reached"):
        _run(_fake(targets=[{"target": "t", "met": True}]), tmp_path)


def test_int_list() -> None:
    assert int_list("16, 64,256,") == (16, 64, 256)


def test_a_checkpoint_draws_the_plot_only_when_asked(tmp_path: Path) -> None:
    """Part-way results are written as JSON and Markdown; the plot too where the benchmark says
    its plot reads partial results (one that spans sessions); the end always draws it."""
    module = _fake()
    plotted: list[object] = []
    module.plot = lambda report, path: (plotted.append(report["size"]), path.write_bytes(b"png"))
    seen: list[list[str]] = []

    def run(settings: Settings, progress: Progress) -> dict:
        for size, plot in ((1, False), (2, True)):
            progress.checkpoint({"size": size, "targets": []}, plot=plot)
            seen.append(sorted(path.name for path in tmp_path.iterdir()))
        return {"size": 3, "targets": []}

    module.run = run
    paths = _run(module, tmp_path)
    assert seen == [["fake.json", "fake.md"], ["fake.json", "fake.md", "fake.png"]]
    assert plotted == [2, 3]
    assert [path.name for path in paths] == ["fake.json", "fake.md", "fake.png"]
