"""``fractal quantize`` and the fast twin: the int8 twin of a real bundle, its manifest (cosines
and k-NN cost), and every refusal."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bundle import ENCODER_FILE, MANIFEST_FILE, load_bundle
from tests.service.bundles import v5_bundle
from training import quantize
from training.bundle_embeddings import onnx_embeddings
from training.cli import MAX_KNN_COST, build_parser, main
from training.data.dataset import DatasetSplits
from training.data.registry import load_dataset
from training.errors import FractalError
from training.evaluation.knn import knn_accuracy_table
from training.quantize import (
    MIN_MEAN_COSINE,
    DynamicInt8,
    describe_knn_cost,
    quantize_bundle,
    row_cosines,
    twin_dir,
)

TRAIN, TEST = 300, 60
UNBOUNDED = math.inf
"""The k-NN cost bound of the tests that need a twin written: 60 test texts measure the cost to
a couple of points, so only the tests of the bound itself set one."""
QUICK = DynamicInt8()
"""The recipe of the tests whose point is not the recipe: seconds, where NNCF's calibration
takes about 20 s on one core."""


@pytest.fixture(scope="module")
def data() -> DatasetSplits:
    """CLINC-150 rows, the V5 test bundle's labels (domain, intent)."""
    return load_dataset("clinc150", max_train=TRAIN, max_test=TEST)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return v5_bundle(tmp_path_factory)


@pytest.fixture(scope="module")
def quantized(source: Path, data: DatasetSplits, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("quantized") / "bundle"
    quantize_bundle(source, out, data, max_knn_cost_points=UNBOUNDED)
    return out


@pytest.fixture(scope="module")
def embeddings(source: Path, quantized: Path, data: DatasetSplits) -> tuple[np.ndarray, ...]:
    """Both graphs' embeddings of the training texts, then the test texts."""
    texts = [*data.train.texts, *data.test.texts]
    runtime = load_bundle(quantized).quantization.runtime
    return onnx_embeddings(source, texts), onnx_embeddings(quantized, texts, runtime)


def _hashes(folder: Path) -> dict[str, str]:
    return json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))["files"]


def test_the_twin_is_a_verified_bundle_with_an_int8_encoder(source: Path, quantized: Path) -> None:
    fp32, int8 = load_bundle(source), load_bundle(quantized)
    assert int8.name == f"{fp32.name}-int8"
    assert int8.content_hash != fp32.content_hash
    # Everything but the encoder is the source's, byte for byte.
    assert set(int8.files) == set(fp32.files)
    changed = {name for name in fp32.files if int8.files[name] != fp32.files[name]}
    assert changed == {ENCODER_FILE}
    assert (quantized / ENCODER_FILE).stat().st_size < (source / ENCODER_FILE).stat().st_size / 3
    assert (int8.dim, int8.prefix_dims, int8.granularity) == (
        fp32.dim, fp32.prefix_dims, fp32.granularity
    )
    quantization = int8.quantization
    assert quantization.weight_type == "QInt8" and quantization.per_channel is True
    # The default recipe: static int8 for OpenVINO, which the service then runs it on.
    assert quantization.runtime == "openvino" and quantization.method.startswith("nncf")
    assert quantization.source_bundle_hash == fp32.content_hash
    assert quantization.cosine_to_fp32.texts == TRAIN + TEST


def test_recorded_cosines_are_those_of_the_two_graphs(
    quantized: Path, embeddings: tuple[np.ndarray, ...]
) -> None:
    cosines = row_cosines(*embeddings)
    recorded = load_bundle(quantized).quantization.cosine_to_fp32
    assert recorded.mean == pytest.approx(float(cosines.mean()), abs=1e-5)
    assert recorded.min == pytest.approx(float(cosines.min()), abs=1e-5)
    assert MIN_MEAN_COSINE <= recorded.min <= recorded.mean < 1.0  # close, not identical


def test_recorded_knn_cost_is_that_of_the_two_graphs(
    quantized: Path, data: DatasetSplits, embeddings: tuple[np.ndarray, ...]
) -> None:
    """Domain labels at the coarse prefix (64), intent labels at the fine one (256), k = 5."""
    accuracy = {
        name: knn_accuracy_table(
            vectors[:TRAIN], data.train.labels, vectors[TRAIN:], data.test.labels, [64, 256]
        )
        for name, vectors in zip(("fp32", "int8"), embeddings, strict=True)
    }
    cost = load_bundle(quantized).quantization.knn_cost
    assert (cost.dataset, cost.k, cost.train_texts, cost.test_texts) == ("clinc150", 5, 300, 60)
    assert (cost.coarse.level, cost.coarse.dim, cost.fine.level, cost.fine.dim) == (
        "domain", 64, "intent", 256
    )
    assert cost.coarse.fp32 == pytest.approx(accuracy["fp32"][0, 0])
    assert cost.coarse.quantized == pytest.approx(accuracy["int8"][0, 0])
    assert cost.fine.fp32 == pytest.approx(accuracy["fp32"][1, 1])
    assert cost.fine.quantized == pytest.approx(accuracy["int8"][1, 1])
    assert cost.coarse.fp32 > 0.5  # a trained bundle, not chance (1 in 10 domains)
    drops = [cost.coarse.fp32 - cost.coarse.quantized, cost.fine.fp32 - cost.fine.quantized]
    assert cost.points == pytest.approx(100 * max(drops))
    assert describe_knn_cost(cost).startswith(f"{cost.points:.2f} k-NN points (domain@64d ")


def test_a_twin_that_costs_more_than_the_bound_is_refused(
    source: Path, quantized: Path, data: DatasetSplits, tmp_path: Path
) -> None:
    """The same graphs on the same texts cost the same: just under the recorded cost refuses,
    naming that cost, and the recorded cost itself passes."""
    points = load_bundle(quantized).quantization.knn_cost.points
    with pytest.raises(
        FractalError,
        match=rf"costs {points:.2f} k-NN points .* more than the .* allowed \(--max-knn-cost\)",
    ):
        quantize_bundle(source, tmp_path / "refused", data, max_knn_cost_points=points - 0.01)
    assert list(tmp_path.iterdir()) == []  # neither the twin nor its staging folder
    written = quantize_bundle(source, tmp_path / "kept", data, max_knn_cost_points=points)
    assert written.quantization.knn_cost.points == points


def test_row_cosines() -> None:
    a = np.array([[1.0, 0.0], [1.0, 1.0], [3.0, 4.0]])
    b = np.array([[0.0, 2.0], [-1.0, -1.0], [6.0, 8.0]])
    assert row_cosines(a, b) == pytest.approx([0.0, -1.0, 1.0])


def test_refusals_leave_everything_as_it_was(
    source: Path, quantized: Path, data: DatasetSplits, tmp_path: Path
) -> None:
    source_manifest = (source / MANIFEST_FILE).read_bytes()

    def refused(source_dir: Path, out: Path, rows: DatasetSplits = data, bound: float = 1.0):
        return quantize_bundle(source_dir, out, rows, max_knn_cost_points=bound)

    with pytest.raises(FractalError, match="already quantised"):
        refused(quantized, tmp_path / "twice")
    with pytest.raises(FractalError, match="must differ from the source"):
        refused(source, source)
    with pytest.raises(FractalError, match="must be a number of points"):
        refused(source, tmp_path / "nan", bound=math.nan)
    with pytest.raises(FractalError, match="needs labelled training and test texts"):
        refused(source, tmp_path / "no-texts", DatasetSplits(data.train, data.test.subset([])))
    three_levels = load_dataset("clinc150-3level", max_train=TRAIN, max_test=TEST)
    with pytest.raises(FractalError, match="trained on other labels .* pass the bundle's"):
        refused(source, tmp_path / "other-labels", three_levels)
    with pytest.raises(FractalError, match="not found"):
        refused(tmp_path / "missing", tmp_path / "out")
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "keep.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(FractalError, match="not empty"):
        refused(source, occupied)
    assert (occupied / "keep.txt").read_text(encoding="utf-8") == "mine"
    assert (source / MANIFEST_FILE).read_bytes() == source_manifest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["occupied"]  # no staging left


def test_a_tampered_source_is_refused(
    source: Path, data: DatasetSplits, tmp_path: Path
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)
    (copy / ENCODER_FILE).write_bytes(b"not the exported graph")
    with pytest.raises(FractalError, match="does not match its sha256"):
        quantize_bundle(copy, tmp_path / "out", data, max_knn_cost_points=UNBOUNDED)


def test_a_graph_far_from_fp32_is_refused_and_not_written(
    source: Path, data: DatasetSplits, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stand-in for a broken quantisation: the cosines the check computes come out at 0.5.
    monkeypatch.setattr(quantize, "row_cosines", lambda a, b: np.full(len(a), 0.5))
    with pytest.raises(FractalError, match="mean cosine 0.5000 .* not written"):
        quantize_bundle(
            source, tmp_path / "out", data, max_knn_cost_points=UNBOUNDED, recipe=QUICK
        )
    assert list(tmp_path.iterdir()) == []


def test_overwrite_replaces_a_bundle(source: Path, data: DatasetSplits, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    fewer = DatasetSplits(data.train.subset(range(50)), data.test.subset(range(10)))
    quantize_bundle(source, out, fewer, max_knn_cost_points=UNBOUNDED, name="first", recipe=QUICK)
    written = quantize_bundle(
        source, out, data, max_knn_cost_points=UNBOUNDED, name="second", overwrite=True,
        recipe=QUICK,
    )
    assert load_bundle(out) == written and written.name == "second"


def test_the_twin_of_a_bundle_sits_beside_it(tmp_path: Path, monkeypatch) -> None:
    assert twin_dir(tmp_path / "run" / "bundle") == tmp_path / "run" / "bundle-int8"
    monkeypatch.chdir(tmp_path)
    assert twin_dir(Path(".")) == tmp_path.parent / f"{tmp_path.name}-int8"


def test_per_tensor_recipe_is_described_and_recorded() -> None:
    recipe = DynamicInt8(per_channel=False)
    assert "per-tensor" in recipe.describe()
    assert recipe.to_json()["per_channel"] is False


def test_cli(source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "int8"
    args = ["quantize", str(source), "--out", str(out), "--max-train", "300", "--max-test", "60",
            "--recipe", "onnxruntime-int8"]  # fmt: skip
    assert build_parser().parse_args(args).max_knn_cost == MAX_KNN_COST == 0.5
    assert main([*args, "--max-knn-cost", "inf"]) == 0
    printed = capsys.readouterr().out
    quantization = load_bundle(out).quantization
    cosine, cost = quantization.cosine_to_fp32, quantization.knn_cost
    assert printed == (
        f"bundle: {out} ({DynamicInt8().describe()}; cosine to fp32 on 360 clinc150 texts: "
        f"mean {cosine.mean:.4f}, min {cosine.min:.4f}; cost {describe_knn_cost(cost)} on 60 "
        "test texts)\n"
    )
    assert main([*args, "--max-knn-cost", "inf"]) == 2
    assert "is not empty (pass --overwrite)" in capsys.readouterr().err
    refused = tmp_path / "refused"
    bound = str(cost.points - 0.01)
    assert main([*args[:3], str(refused), *args[4:], "--max-knn-cost", bound]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the quantised encoder costs ") and err.count("\n") == 1
    assert err.endswith(f"more than the {float(bound):g} allowed (--max-knn-cost): not written\n")
    assert not refused.exists()


def test_cli_refuses_an_unknown_recipe(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "int8"
    assert main(["quantize", str(source), "--out", str(out), "--recipe", "int4"]) == 2
    assert capsys.readouterr().err == (
        "error: --recipe must be one of openvino-int8, onnxruntime-int8, not 'int4'\n"
    )
    assert not out.exists()


def test_cli_runs_without_torch(source: Path, tmp_path: Path) -> None:
    """``fractal quantize`` (the default recipe) needs ONNX Runtime, NNCF and the bundle format,
    never torch: it runs with ``import torch`` made to fail. (NNCF imports torch where it is
    installed, and works without it.)"""
    argv = ["quantize", str(source), "--out", str(tmp_path / "int8"), "--max-train", "40",
            "--max-test", "6", "--max-knn-cost", "inf"]  # fmt: skip
    code = (
        "import sys; sys.modules['torch'] = None; from training.cli import main; "
        f"sys.exit(main({argv!r}))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[2])
    assert result.returncode == 0
    assert load_bundle(tmp_path / "int8").quantization.cosine_to_fp32.texts == 46
