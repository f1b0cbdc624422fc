"""``fractal quantize``: the int8 twin of a real bundle, its manifest, and every refusal."""

from __future__ import annotations

import json
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
from training.cli import main
from training.errors import FractalError
from training.quantize import MIN_MEAN_COSINE, Quantisation, quantize_bundle, row_cosines

TEXTS = [
    "how do i freeze my card",
    "what is the weather like in paris tomorrow",
    "book a table for two at an italian place",
    "set an alarm for seven",
    "transfer fifty dollars to my savings account",
    "what's my credit score",
]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return v5_bundle(tmp_path_factory)


@pytest.fixture(scope="module")
def quantized(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("quantized") / "bundle"
    quantize_bundle(source, out, TEXTS)
    return out


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
    assert quantization.source_bundle_hash == fp32.content_hash
    assert quantization.cosine_to_fp32.texts == len(TEXTS)


def test_recorded_cosines_are_those_of_the_two_graphs(source: Path, quantized: Path) -> None:
    cosines = row_cosines(onnx_embeddings(source, TEXTS), onnx_embeddings(quantized, TEXTS))
    recorded = load_bundle(quantized).quantization.cosine_to_fp32
    assert recorded.mean == pytest.approx(float(cosines.mean()), abs=1e-5)
    assert recorded.min == pytest.approx(float(cosines.min()), abs=1e-5)
    assert MIN_MEAN_COSINE <= recorded.min <= recorded.mean < 1.0  # close, not identical


def test_row_cosines() -> None:
    a = np.array([[1.0, 0.0], [1.0, 1.0], [3.0, 4.0]])
    b = np.array([[0.0, 2.0], [-1.0, -1.0], [6.0, 8.0]])
    assert row_cosines(a, b) == pytest.approx([0.0, -1.0, 1.0])


def test_refusals_leave_everything_as_it_was(
    source: Path, quantized: Path, tmp_path: Path
) -> None:
    source_manifest = (source / MANIFEST_FILE).read_bytes()
    with pytest.raises(FractalError, match="already quantised"):
        quantize_bundle(quantized, tmp_path / "twice", TEXTS)
    with pytest.raises(FractalError, match="must differ from the source"):
        quantize_bundle(source, source, TEXTS)
    with pytest.raises(FractalError, match="non-empty check texts"):
        quantize_bundle(source, tmp_path / "no-texts", ["", "  "])
    with pytest.raises(FractalError, match="not found"):
        quantize_bundle(tmp_path / "missing", tmp_path / "out", TEXTS)
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "keep.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(FractalError, match="not empty"):
        quantize_bundle(source, occupied, TEXTS)
    assert (occupied / "keep.txt").read_text(encoding="utf-8") == "mine"
    assert (source / MANIFEST_FILE).read_bytes() == source_manifest
    assert not (tmp_path / "twice").exists() and not (tmp_path / "no-texts").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["occupied"]  # no staging left


def test_a_tampered_source_is_refused(source: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)
    (copy / ENCODER_FILE).write_bytes(b"not the exported graph")
    with pytest.raises(FractalError, match="does not match its sha256"):
        quantize_bundle(copy, tmp_path / "out", TEXTS)


def test_a_graph_far_from_fp32_is_refused_and_not_written(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stand-in for a broken quantisation: the cosines the check computes come out at 0.5.
    monkeypatch.setattr(quantize, "row_cosines", lambda a, b: np.full(len(a), 0.5))
    with pytest.raises(FractalError, match="mean cosine 0.5000 .* not written"):
        quantize_bundle(source, tmp_path / "out", TEXTS)
    assert list(tmp_path.iterdir()) == []


def test_overwrite_replaces_a_bundle(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    quantize_bundle(source, out, TEXTS[:2], name="first")
    written = quantize_bundle(source, out, TEXTS, name="second", overwrite=True)
    assert load_bundle(out) == written and written.name == "second"


def test_per_tensor_recipe_is_described_and_recorded() -> None:
    recipe = Quantisation(per_channel=False)
    assert "per-tensor" in recipe.describe()
    assert recipe.to_json()["per_channel"] is False


def test_cli(source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "int8"
    assert main(["quantize", str(source), "--out", str(out), "--check-texts", "40"]) == 0
    printed = capsys.readouterr().out
    assert f"bundle: {out}" in printed and "cosine to fp32 on 40 clinc150 texts" in printed
    assert load_bundle(out).quantization.cosine_to_fp32.texts == 40
    assert main(["quantize", str(source), "--out", str(out)]) == 2
    assert "is not empty (pass --overwrite)" in capsys.readouterr().err


def test_cli_runs_without_torch(source: Path, tmp_path: Path) -> None:
    """``fractal quantize`` needs ONNX Runtime and the bundle format, never torch."""
    argv = ["quantize", str(source), "--out", str(tmp_path / "int8"), "--check-texts", "6"]
    code = (
        "import sys; from training.cli import main; "
        f"sys.exit(main({argv!r}) or 3 * ('torch' in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[2])
    assert result.returncode == 0
    assert load_bundle(tmp_path / "int8").quantization.cosine_to_fp32.texts == 6
