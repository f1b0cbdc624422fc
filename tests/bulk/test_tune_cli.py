"""``fractal tune``: a real index folder measured as the service serves it, from stored
documents or from a file of query texts encoded with the bundle; the record lands in the
collection's folder; bad input is one ``error:`` line and status 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bundle import load_bundle
from index.faiss_indexes import SQ_QUANTIZERS
from index.first_stage import DEGREES
from index.first_stage import EF_VALUES as STAGE_EF_VALUES
from index.first_stage import FACTORS as STAGE_FACTORS
from index.search_tuning import EF_VALUES, FACTORS, FIRST_STAGES_FILE, TUNING_FILE, write_record
from tests.service.helpers import add_documents, make_settings, serve
from training.cli import main as fractal

TEXTS = [f"document {n} about topic {n % 11} in colour {n % 5}" for n in range(300)]


@pytest.fixture(scope="module")
def index_dir(tiny_bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An index folder with 300 documents, as the service with its default settings left it."""
    folder = tmp_path_factory.mktemp("tune-index")
    with serve(make_settings(tiny_bundle_dir, folder)) as client:
        add_documents(client, TEXTS)
    return folder


def _record(index_dir: Path) -> dict:
    return json.loads((index_dir / TUNING_FILE).read_text())


def test_stored_documents_as_queries(
    index_dir: Path, tiny_bundle_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["tune", str(index_dir), "--bundle", str(tiny_bundle_dir), "--sample", "30"]
    assert fractal([*argv, "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "C2F on the served 64-d flat M32 graph, 300 documents, 30 queries" in printed
    assert f"recorded in {index_dir / TUNING_FILE}" in printed
    record = _record(index_dir)
    assert record["graph"] == {"dim": 64, "storage": "flat", "m": 32, "documents": 300}
    assert record["query_source"].startswith("stored documents")
    assert len(record["points"]) == len(EF_VALUES) * len(FACTORS)
    assert set(record["choices"]) == {"0.95", "0.99"}


def test_query_texts_from_a_file(
    index_dir: Path, tiny_bundle_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    queries = tmp_path / "queries.txt"
    queries.write_text("topic 3 in colour 2\n\n  document about topic 7  \n")
    argv = ["tune", str(index_dir), "--bundle", str(tiny_bundle_dir), "--queries", str(queries)]
    assert fractal([*argv, "--no-progress"]) == 0
    assert "300 documents, 2 queries (given texts)" in capsys.readouterr().out
    assert _record(index_dir)["queries"] == 2


def test_every_first_stage_measured_on_the_stored_documents(
    index_dir: Path, tiny_bundle_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["tune", str(index_dir), "--bundle", str(tiny_bundle_dir), "--sample", "20"]
    assert fractal([*argv, "--first-stages", "150", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "## C2F first stage" in printed and "Served: 64-d flat M32." in printed
    record = json.loads((index_dir / FIRST_STAGES_FILE).read_text())
    assert record["served"] == {"dim": 64, "storage": "flat", "m": 32, "documents": 300}
    assert record["documents"] == 150 and record["queries"] == 20  # the queries left out
    candidates = {(point["dim"], point["storage"], point["m"]) for point in record["points"]}
    prefixes = load_bundle(tiny_bundle_dir).prefix_dims
    assert candidates == {(d, s, m) for d in prefixes for s in SQ_QUANTIZERS for m in DEGREES}
    assert len(record["points"]) == len(candidates) * len(STAGE_EF_VALUES) * len(STAGE_FACTORS)
    assert all(0.0 <= point["recall"] <= 1.0 for point in record["points"])
    assert set(record["choices"]) == {"0.95", "0.99"}


def test_the_measured_first_stage_is_the_graph_tuned_under_first_stage_index(
    index_dir: Path,
    tiny_bundle_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With FRACTAL_FIRST_STAGE=index the collection opens with the recorded graph (rebuilt from
    its stored vectors), and that is the graph the sweep measures."""
    folder = shutil.copytree(index_dir, tmp_path / "index")
    choice = {"dim": 128, "storage": "flat", "m": 16, "ef_search": 16, "factor": 2}
    write_record(folder / FIRST_STAGES_FILE, {"documents": 300, "choices": {"0.95": choice}})
    monkeypatch.setenv("FRACTAL_FIRST_STAGE", "index")
    argv = ["tune", str(folder), "--bundle", str(tiny_bundle_dir), "--sample", "20"]
    assert fractal([*argv, "--no-progress"]) == 0
    assert "C2F on the served 128-d flat M16 graph, 300 documents" in capsys.readouterr().out
    assert _record(folder)["graph"] == {"dim": 128, "storage": "flat", "m": 16, "documents": 300}


def test_bad_input_is_one_error_line(
    index_dir: Path, tiny_bundle_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n")
    bundle = ["--bundle", str(tiny_bundle_dir), "--no-progress"]
    cases = {
        "no such index folder": ["tune", str(tmp_path / "missing"), *bundle],
        "no queries (one text per line)": [
            "tune",
            str(index_dir),
            *bundle,
            "--queries",
            str(empty),
        ],
        "no collection 'news'": ["tune", str(index_dir), *bundle, "--collection", "news"],
        "--sample must be at least 1": ["tune", str(index_dir), *bundle, "--sample", "0"],
        "--first-stages must be 0 or more": [
            "tune", str(index_dir), *bundle, "--first-stages", "-1",
        ],
        "--first-stages: 5 documents besides the queries": [
            "tune", str(index_dir), *bundle, "--sample", "295", "--first-stages", "50",
        ],
    }
    for message, argv in cases.items():
        capsys.readouterr()
        assert fractal(argv) == 2, message
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and error[0].startswith("error: ") and message in error[0]
