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
from training.head_job import load_run
from training.quantize import DEFAULT_RECIPE, RECIPES


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _rows(rows: list[tuple[str, str]]) -> str:
    return "text,label\n" + "".join(f"{text},{label}\n" for text, label in rows)


def _write_latin_1(path: Path, first_text: str) -> Path:
    """A CSV in Latin-1 whose first row's text is ``first_text``: two levels, two labels each."""
    path.write_bytes(_rows([(first_text, "A:x"), ("b", "B:y")] * 5).encode("latin-1"))
    return path


@pytest.mark.parametrize(
    ("make_args", "message"),
    [
        (lambda tmp: ["train", "--dataset", "imdb"], "unknown dataset 'imdb'"),
        (lambda tmp: ["train", "--objective", "fractal"], "unknown objective 'fractal'"),
        (lambda tmp: ["run", "--objectives", "v5,nope"], "unknown objective 'nope'"),
        # Refused before training, not after it.
        (lambda tmp: ["run", "--recipe", "int4"], "--recipe must be one of"),
        (lambda tmp: ["run", "--max-knn-cost", "nan"], "must be a number of points"),
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
            lambda tmp: ["train", "--dataset", str(_write_latin_1(tmp / "latin.csv", "café"))],
            "byte 0xe9 at offset 14 is not valid utf-8; pass --encoding (e.g. --encoding latin-1)",
        ),
        (
            lambda tmp: [
                "train", "--dataset", str(_write_latin_1(tmp / "latin.csv", "café")),
                "--encoding", "klingon",
            ],
            "unknown encoding 'klingon'",
        ),
        (
            lambda tmp: ["train", "--dataset", "clinc150", "--encoding", "latin-1"],
            "options encoding apply to your own files",
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


def test_run_refuses_an_occupied_twin_folder_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    twin = tmp_path / "out" / "bundle-int8"
    twin.mkdir(parents=True)
    (twin / "notes.txt").write_text("mine", encoding="utf-8")
    assert main(["run", "--dataset", "imdb", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        f"error: bundle directory {twin} is not empty (pass --overwrite)\n"
    )
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["bundle-int8"]


def test_run_trains_evaluates_and_exports_a_bundle_and_its_fast_twin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "clinc"
    # 120 test texts measure a twin's k-NN cost to about a point: the bound is lifted here.
    code = main(
        ["run", "--dataset", "clinc150", "--max-train", "600", "--max-test", "120",
         "--objectives", "v5,mrl", "--seeds", "42,123", "--epochs", "1", "--lr", "1e-3",
         "--out", str(out), "--no-progress", "--max-knn-cost", "inf"]
    )  # fmt: skip
    assert code == 0
    manifest = load_bundle(out / "bundle")
    # The fast twin, beside the bundle and checked on the run's own rows: its fp32 k-NN
    # accuracies are the bundle's evaluation's (ONNX, not torch: within a text or so).
    twin = load_bundle(out / "bundle-int8")
    assert twin.name == "clinc150-v5-int8"
    assert twin.quantization.source_bundle_hash == manifest.content_hash
    cost = twin.quantization.knn_cost
    assert (cost.dataset, cost.train_texts, cost.test_texts) == ("clinc150", 600, 120)
    accuracy = manifest.evaluation["knn_accuracy"]  # [level][prefix], prefixes 64 … 256
    assert cost.coarse.fp32 == pytest.approx(accuracy[0][0], abs=0.01)
    assert cost.fine.fp32 == pytest.approx(accuracy[1][-1], abs=0.01)
    printed = capsys.readouterr().out
    assert f"bundle: {out / 'bundle'} (" in printed
    assert f"fast twin: {out / 'bundle-int8'} ({RECIPES[DEFAULT_RECIPE].describe()};" in printed
    assert f"cost {cost.points:.2f} k-NN points (domain@64d" in printed
    assert manifest.objective == "v5"
    assert manifest.prefix_dims == (64, 128, 192, 256)
    # The shortlist prefix is measured on the run's data: recorded whichever prefix it is.
    shortlist = manifest.evaluation["shortlist"]
    assert (shortlist["documents"], shortlist["queries"]) == (600, 120)
    assert [row["dim"] for row in shortlist["recall_at_k"]] == [64, 128, 192]
    assert all(0 <= v <= 1 for row in shortlist["recall_at_k"] for v in row["recall"])
    assert manifest.granularity == {
        "coarse": 64, "fine": 256, "shortlist": shortlist["shortlist_dim"]
    }
    assert manifest.shortlist_dim in manifest.prefix_dims
    # The coarse route's beam, measured on the run's domains at the coarse prefix.
    beam = shortlist["coarse_beam"]
    assert (beam["dim"], beam["documents"], beam["queries"]) == (64, 600, 120)
    assert set(beam["choices"]) == {"flat", "sq8", "sq8u", "sq4", "tq4"}
    assert 0 < beam["exact_precision"] <= 1
    assert manifest.onnx_max_abs_diff < 1e-3
    assert [level.name for level in manifest.hierarchy] == ["domain", "intent"]
    assert len(manifest.hierarchy[1].labels) == 150
    report = json.loads((out / "report" / "report.json").read_text())
    assert set(report["methods"]) == {"raw", "v5", "mrl"}
    for name in ("report.md", "accuracy_by_prefix.png", "workload.png"):
        assert (out / "bundle" / name).is_file()
    written = (out / "bundle" / "report.md").read_text(encoding="utf-8")
    assert "## C2F shortlist" in written and "## Coarse beam" in written
    # The auto router, fitted on the join construction over v5-seed42's 60 held-out rows.
    router = load_router(out / "bundle", manifest)
    assert router is not None and ROUTER_FILE in manifest.files
    assert router.fit["construction"] == "join" and router.fit["validation_rows"] == 60
    assert (router.fit["coarse_queries"], router.fit["fine_queries"]) == (60, 60)
    domains = json.loads((data_dir() / "clinc150" / "domains.json").read_text(encoding="utf-8"))
    domain_of = {intent: domain for domain, intents in domains.items() for intent in intents}
    coarse, fine = manifest.hierarchy[0].labels, manifest.hierarchy[1].labels
    assert router.fine_parents == tuple(coarse.index(domain_of[intent]) for intent in fine)
    runs = sorted(p.name for p in (out / "runs").iterdir())
    assert runs == ["mrl-seed123", "mrl-seed42", "v5-seed123", "v5-seed42"]


# Six fine labels in three coarse ones; "other" under all three, so it is three labels. Latin-1.
QUESTIONS = {
    "LOC:city": [
        "Which city is home to the Louvre?", "Where is Zürich?", "What city hosts the Prado?",
        "Which city has the Golden Gate Bridge?", "What is the capital of Peru?",
        "Which city is called the Big Apple?", "Where is the Kremlin?",
        "What city is Café Central in?",
    ],
    "LOC:other": [
        "Which mountain range crosses Nepal?", "Where does the Nile begin?",
        "Which desert covers most of Algeria?", "What sea lies between Italy and Greece?",
        "Which lake borders Genève?", "Where is the Mariana Trench?",
        "Which river flows through Köln?", "Which island is the largest on Earth?",
    ],
    "NUM:count": [
        "How many moons does Mars have?", "How many keys are on a piano?",
        "How many bones are in a human hand?", "How many players are on a football team?",
        "How many states are in the USA?", "How many strings does a violin have?",
        "How many legs does a spider have?", "How many cantons does Switzerland have?",
    ],
    "NUM:other": [
        "What is the speed of light?", "How hot is the surface of Venus?",
        "How tall is Mount Everest?", "How far is the Moon from the Earth?",
        "How much does a blue whale weigh?", "How deep is Lake Baikal?",
        "What is the boiling point of water?", "How long is the Great Wall?",
    ],
    "ENTY:animal": [
        "What is the fastest land animal?", "Which bird cannot fly but swims?",
        "What animal has black and white stripes?", "Which mammal lays eggs?",
        "What is the largest living reptile?", "Which fish can inflate itself?",
        "What animal is the symbol of WWF?", "Which insect makes honey?",
    ],
    "ENTY:other": [
        "Which instrument has 47 strings?", "What language is spoken in Québec?",
        "What sport uses a shuttlecock?", "Which metal is liquid at room temperature?",
        "What dish is crème brûlée?", "Which colour do you get from blue and yellow?",
        "What game uses a rook and a bishop?", "What currency does Japan use?",
    ],
}


def test_run_on_a_latin_1_file_where_a_name_repeats_under_three_parents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FRACTAL_CACHE_DIR", str(tmp_path / "cache"))
    rows = [(text, label) for label, texts in QUESTIONS.items() for text in texts]
    content = _rows(rows).encode("latin-1")
    data = tmp_path / "questions.csv"
    data.write_bytes(content)
    out = tmp_path / "run"
    args = ["run", "--dataset", str(data), "--level-names", "type,detail", "--objectives", "v5",
            "--seeds", "42", "--epochs", "1", "--batch-size", "8", "--lr", "1e-3",
            "--out", str(out), "--no-progress", "--no-fast-twin"]  # fmt: skip

    assert main(args) == 2
    offset = content.index("ü".encode("latin-1"))
    assert capsys.readouterr().err == (
        f"error: {data}: byte 0xfc at offset {offset} is not valid utf-8; pass --encoding "
        "(e.g. --encoding latin-1)\n"
    )
    assert not out.exists()

    assert main([*args, "--encoding", "latin-1"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["bundle", "report", "runs"]  # no twin
    others = {"ENTY / other", "LOC / other", "NUM / other"}
    manifest = load_bundle(out / "bundle")
    assert [level.name for level in manifest.hierarchy] == ["type", "detail"]
    assert manifest.hierarchy[1].labels.count("other") == 3
    assert others < set(manifest.label_display_names(-1))
    assert len(manifest.label_display_names(-1)) == 6
    report = json.loads((out / "bundle" / "report.json").read_text())
    assert others < set(report["labels"][1]["labels"])
    assert "LOC / other" in (out / "bundle" / "report.md").read_text()

    run = load_run(out / "runs" / "v5-seed42")
    assert run.data.generic_options["encoding"] == "latin-1"
    splits = run.data.load()  # what `fractal evaluate` and `fractal export` read again
    assert {"Where is Zürich?", "What dish is crème brûlée?"} <= set(
        splits.train.texts + splits.test.texts
    )
    assert splits.hierarchy.to_json()["levels"] == manifest.to_json()["hierarchy"]["levels"]

    # `fractal export` of the run writes the fast twin too; its k-NN bound refuses it with one
    # error line, after the fp32 bundle (the same graphs on the same rows cost the same).
    exported = tmp_path / "exported"
    export = ["export", str(out / "runs" / "v5-seed42"), "--out", str(exported), "--no-progress"]
    capsys.readouterr()
    assert main([*export, "--max-knn-cost", "inf"]) == 0
    cost = load_bundle(tmp_path / "exported-int8").quantization.knn_cost
    assert (cost.coarse.level, cost.fine.level) == ("type", "detail")
    assert f"fast twin: {tmp_path / 'exported-int8'} (" in capsys.readouterr().out
    bound = str(cost.points - 0.01)
    assert main([*export, "--overwrite", "--max-knn-cost", bound]) == 2
    err = capsys.readouterr().err  # the encoder's loading bars, then the error line
    error = err.splitlines()[-1]
    assert "Traceback" not in err and err.count("error: ") == 1
    assert error.startswith("error: the quantised encoder costs ")
    assert error.endswith(
        f"(--max-knn-cost): not written; the fp32 bundle {exported} is written, and "
        f"{tmp_path / 'exported-int8'} still holds the twin of an earlier bundle "
        "(--no-fast-twin skips the twin)"
    )
    stale = load_bundle(tmp_path / "exported-int8").quantization
    assert stale.source_bundle_hash != load_bundle(exported).content_hash
