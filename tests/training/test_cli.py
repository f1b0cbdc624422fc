"""The ``fractal`` CLI end to end, and its answer to bad input: one line, exit 2, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bundle import load_bundle
from bundle.router import ROUTER_FILE, load_router
from training.cli import main
from training.data.registry import data_dir


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _rows(rows: list[tuple[str, str]]) -> str:
    return "text,label\n" + "".join(f"{text},{label}\n" for text, label in rows)


@pytest.mark.parametrize(
    ("make_args", "message"),
    [
        (lambda tmp: ["train", "--dataset", "imdb"], "unknown dataset 'imdb'"),
        (lambda tmp: ["train", "--objective", "fractal"], "unknown objective 'fractal'"),
        (lambda tmp: ["run", "--objectives", "v5,nope"], "unknown objective 'nope'"),
        (lambda tmp: ["train", "--dataset", str(tmp / "missing.csv")], "missing.csv"),
        (
            lambda tmp: ["train", "--dataset", str(_write(tmp / "bad.csv", "words,tag\na,b\n"))],
            "label",
        ),
        (
            lambda tmp: [
                "train",
                "--dataset",
                str(_write(tmp / "one.csv", _rows([(f"text {i}", "A:x") for i in range(20)]))),
            ],
            "single label",
        ),
        (
            lambda tmp: [
                "train",
                "--dataset",
                str(
                    _write(
                        tmp / "parents.csv",
                        _rows([("a", "A:x"), ("b", "B:x"), ("c", "A:y"), ("d", "B:z")] * 5),
                    )
                ),
            ],
            "two",
        ),
        (
            lambda tmp: [
                "train",
                "--dataset",
                str(_write(tmp / "empty.csv", _rows([("", "A:x"), ("b", "B:y")] * 5))),
            ],
            "empty text",
        ),
        (lambda tmp: ["export", str(tmp), "--out", str(tmp / "b")], "not a training run"),
        (lambda tmp: ["mshc", "--dataset", "imdb"], "unknown dataset 'imdb'"),
        (lambda tmp: ["mshc", "--vq-epochs", "0"], "at least one epoch"),
        (lambda tmp: ["mshc", "--max-train", "100"], "at least 256 training texts"),
    ],
)
def test_bad_input_is_one_clear_error(
    make_args, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = make_args(tmp_path)
    if args[0] in ("train", "run", "mshc"):
        args += ["--out", str(tmp_path / "out")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert message in err
    assert not (tmp_path / "out").exists()


def test_error_in_a_real_process_has_no_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "training.cli",
            "train",
            "--dataset",
            "nope",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "unknown dataset 'nope'" in done.stderr


def test_run_trains_evaluates_and_exports_a_bundle(tmp_path: Path) -> None:
    out = tmp_path / "clinc"
    code = main(
        ["run", "--dataset", "clinc150", "--max-train", "600", "--max-test", "120",
         "--objectives", "v5,mrl", "--seeds", "42,123", "--epochs", "1", "--lr", "1e-3",
         "--out", str(out), "--no-progress"]
    )  # fmt: skip
    assert code == 0
    manifest = load_bundle(out / "bundle")
    assert manifest.objective == "v5"
    assert manifest.prefix_dims == (64, 128, 192, 256)
    assert manifest.granularity == {"coarse": 64, "fine": 256}
    assert manifest.onnx_max_abs_diff < 1e-3
    assert [level.name for level in manifest.hierarchy] == ["domain", "intent"]
    assert len(manifest.hierarchy[1].labels) == 150
    report = json.loads((out / "report" / "report.json").read_text())
    assert set(report["methods"]) == {"raw", "v5", "mrl"}
    for name in ("report.md", "accuracy_by_prefix.png", "workload.png"):
        assert (out / "bundle" / name).is_file()
    runs = sorted(p.name for p in (out / "runs").iterdir())
    assert runs == ["mrl-seed123", "mrl-seed42", "v5-seed123", "v5-seed42"]
    # The auto router, fitted on the join construction over v5-seed42's 60 held-out rows.
    router = load_router(out / "bundle", manifest)
    assert router is not None and ROUTER_FILE in manifest.files
    assert router.fit["construction"] == "join" and router.fit["validation_rows"] == 60
    assert (router.fit["coarse_queries"], router.fit["fine_queries"]) == (60, 60)
    domains = json.loads((data_dir() / "clinc150" / "domains.json").read_text(encoding="utf-8"))
    domain_of = {intent: domain for domain, intents in domains.items() for intent in intents}
    coarse, fine = manifest.hierarchy[0].labels, manifest.hierarchy[1].labels
    assert router.fine_parents == tuple(coarse.index(domain_of[intent]) for intent in fine)
