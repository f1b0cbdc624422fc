"""Start-up: settings from the environment, and a bad setting, bundle or index dir ends the
process with one ``error:`` line, before the server starts."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import onnxruntime
import pytest
from pydantic import ValidationError

from bundle import CosineToFP32, Quantization, load_bundle, write_manifest
from encoding.encoder import CPU, CUDA, OnnxEncoder
from service.errors import StartupError
from service.settings import Settings, describe_settings_error
from service.startup import cpu_recipe_on_gpu, cuda_not_loaded, load_runtime
from tests.service.helpers import make_settings

ROOT = Path(__file__).resolve().parents[2]


def _environment(**variables: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("FRACTAL_")}
    return {**env, **variables}


def _serve(**variables: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service"],
        cwd=ROOT,
        env=_environment(**variables),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_settings_come_from_fractal_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRACTAL_BUNDLE_DIR", "/bundles/b")
    monkeypatch.setenv("FRACTAL_INDEX_KINDS", " exact , pq ")
    monkeypatch.setenv("FRACTAL_MAX_K", "500")
    monkeypatch.setenv("FRACTAL_SFS", "true")
    monkeypatch.setenv("FRACTAL_DATA_DIR", "/data")  # the trainer's variable: ignored here
    settings = Settings()
    assert settings.bundle_dir == Path("/bundles/b")
    assert settings.index_kinds == ("exact", "pq")
    assert (settings.max_k, settings.sfs, settings.default_k) == (500, True, 10)
    assert settings.hnsw.m == 32 and settings.pq.nbits == 8


@pytest.mark.parametrize(
    ("variables", "needle"),
    [
        ({}, "FRACTAL_BUNDLE_DIR: Field required"),
        ({"FRACTAL_MAX_K": "lots"}, "FRACTAL_MAX_K: Input should be a valid integer"),
        ({"FRACTAL_INDEX_KINDS": "hnsw,ivf"}, "FRACTAL_INDEX_KINDS: Input should be 'exact'"),
        ({"FRACTAL_INDEX_KINDS": ""}, "index_kinds must list some of exact, hnsw, pq"),
        ({"FRACTAL_DEFAULT_K": "20", "FRACTAL_MAX_K": "10"}, "must not exceed max_k"),
        ({"FRACTAL_QUEUE_DEPTH": "8"}, "queue_depth (8) must be at least max_texts (128)"),
        ({"FRACTAL_PORT": "70000"}, "FRACTAL_PORT"),
    ],
)
def test_bad_settings_are_described_in_one_line(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], needle: str
) -> None:
    for key in list(os.environ):
        if key.startswith("FRACTAL_"):
            monkeypatch.delenv(key)
    if variables:
        monkeypatch.setenv("FRACTAL_BUNDLE_DIR", "/bundles/b")
    for key, value in variables.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValidationError) as error:
        Settings()
    message = describe_settings_error(error.value)
    assert needle in message and "\n" not in message


def test_missing_bundle_ends_the_process_with_one_line(tmp_path: Path) -> None:
    result = _serve(FRACTAL_BUNDLE_DIR=str(tmp_path / "nothing"))
    assert result.returncode == 2
    assert result.stderr == f"error: bundle directory not found: {tmp_path / 'nothing'}\n"
    assert result.stdout == ""


def test_tampered_bundle_ends_the_process_with_one_line(
    tiny_bundle_dir: Path, tmp_path: Path
) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(tiny_bundle_dir, bundle)
    with (bundle / "tokenizer.json").open("a") as tokenizer:
        tokenizer.write(" ")
    result = _serve(FRACTAL_BUNDLE_DIR=str(bundle), FRACTAL_INDEX_DIR=str(tmp_path / "index"))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: bundle file ")
    assert "does not match its sha256" in result.stderr
    assert not (tmp_path / "index").exists()  # refused before anything was written


def test_bad_setting_ends_the_process_with_one_line() -> None:
    result = _serve(FRACTAL_BUNDLE_DIR="/b", FRACTAL_MAX_BATCH_SIZE="0")
    assert result.returncode == 2
    assert result.stderr == (
        "error: invalid settings: FRACTAL_MAX_BATCH_SIZE: Input should be greater than or "
        "equal to 1\n"
    )


def test_index_dir_of_another_bundle_is_refused(
    identity_bundle_dir: Path, v5_bundle_dir: Path, tmp_path: Path
) -> None:
    index_dir = tmp_path / "index"
    load_runtime(make_settings(identity_bundle_dir, index_dir)).collection.close()
    with pytest.raises(StartupError, match="holds vectors of bundle 'identity'"):
        load_runtime(make_settings(v5_bundle_dir, index_dir))


def test_index_parameters_that_do_not_fit_are_refused(
    tiny_bundle_dir: Path, tmp_path: Path
) -> None:
    settings = make_settings(tiny_bundle_dir, tmp_path / "index", index_kinds="pq", pq_m=7)
    with pytest.raises(StartupError, match="PQ m=7 sub-quantizers must divide"):
        load_runtime(settings)


def test_a_quantised_bundle_offered_cuda_names_its_fp32_source(
    tiny_bundle_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A twin's manifest (its graph stays the tiny fp32 one: the warning reads the manifest)."""
    fp32 = load_bundle(tiny_bundle_dir)
    twin_dir = tmp_path / "tiny-int8"
    shutil.copytree(tiny_bundle_dir, twin_dir)
    quantization = Quantization(
        method="onnxruntime.quantization.quantize_dynamic",
        weight_type="QInt8",
        per_channel=True,
        activations="uint8, scale per batch at run time",
        source_bundle=fp32.name,
        source_bundle_hash=fp32.content_hash,
        cosine_to_fp32=CosineToFP32(texts=6, mean=0.99, min=0.98),
    )
    twin = write_manifest(twin_dir, replace(fp32, name="tiny-int8", quantization=quantization))
    assert cpu_recipe_on_gpu(twin, [CPU]) is None
    assert cpu_recipe_on_gpu(fp32, [CUDA, CPU]) is None

    monkeypatch.setattr(OnnxEncoder, "providers", property(lambda self: [CUDA, CPU]))
    with caplog.at_level(logging.WARNING, logger="service"):
        load_runtime(make_settings(twin_dir, tmp_path / "index")).collection.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [cpu_recipe_on_gpu(twin, [CUDA, CPU])]
    assert "bundle 'tiny-int8' has a quantised encoder" in warnings[0]
    assert f"fp32 source bundle 'tiny' (content hash {fp32.content_hash[:12]})" in warnings[0]


@pytest.mark.parametrize(
    ("available", "session", "warned"),
    [
        ([CPU], [CPU], False),  # a CPU build
        ([CUDA, CPU], [CUDA, CPU], False),  # a GPU build that loaded CUDA
        ([CUDA, CPU], [CPU], True),  # a GPU build whose CUDA provider failed to load
        (["TensorrtExecutionProvider", CUDA, CPU], [CPU], True),
    ],
)
def test_a_gpu_build_whose_session_runs_on_the_cpu_is_warned_about(
    available: list[str], session: list[str], warned: bool
) -> None:
    warning = cuda_not_loaded(available, session)
    assert (warning is not None) == warned
    if warning is not None:
        assert warning.startswith("the encoder runs on the CPU: this ONNX Runtime build offers")
        assert "CUDA provider failed to load" in warning
        assert "GET /info (encoder.providers)" in warning


@pytest.mark.filterwarnings("ignore:Specified provider 'CUDAExecutionProvider'")
def test_start_up_warns_once_when_cuda_is_offered_but_not_loaded(
    tiny_bundle_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """This ONNX Runtime is a CPU build told it offers CUDA: the session asks for CUDA and gets
    the CPU, as a GPU build does whose CUDA libraries do not load."""
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: [CUDA, CPU])
    with caplog.at_level(logging.WARNING, logger="service"):
        runtime = load_runtime(make_settings(tiny_bundle_dir, tmp_path / "index"))
    runtime.collection.close()
    assert runtime.encoder.providers == [CPU]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [cuda_not_loaded([CUDA, CPU], [CPU])]


def test_service_never_imports_torch_or_training() -> None:
    code = (
        "import sys, service.app, service.__main__, service.openapi; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'training')); "
        "assert not bad, bad"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
