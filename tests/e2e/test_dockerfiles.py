"""``docker/Dockerfile.gpu`` installs an ONNX Runtime GPU build linked against its base image's
CUDA major version. A build linked against another major cannot load its CUDA provider there, and
the encoder then runs on the CPU. No Docker engine is needed: the checks read the files.
"""

from __future__ import annotations

import re

import pytest
from packaging.requirements import Requirement

from benchmarks.harness.processes import ROOT

GPU_DOCKERFILE = ROOT / "docker" / "Dockerfile.gpu"
PYPROJECT = ROOT / "pyproject.toml"
ORT_GPU = "onnxruntime-gpu"
ORT_GPU_CUDA_MAJOR = {"1.26.0": 12, "1.27.0": 13, "1.31.1": 13}
"""The CUDA major each PyPI ``onnxruntime-gpu`` release links, as read with ``readelf -d`` from
``onnxruntime/capi/libonnxruntime_providers_cuda.so`` in its cp312 manylinux x86_64 wheel:
1.26.0 needs libcublasLt.so.12, libcublas.so.12, libcudart.so.12, libcufft.so.11 and
libcudnn.so.9; 1.27.0 needs libcublasLt.so.13, libcublas.so.13, libcudart.so.13, libnvrtc.so.13
and libcudnn.so.9; 1.31.1 needs libcublasLt.so.13, libcublas.so.13 and libcudart.so.13. Pinning
another release means checking its wheel the same way and adding it here."""
CUDA_BASE = re.compile(r"^FROM\s+nvidia/cuda:(\d+)\.[\w.-]+", re.MULTILINE)
PIP_INSTALL = re.compile(r"pip install (.*)")
GPU_EXTRA = re.compile(r"^gpu = \[(.*)\]$", re.MULTILINE)
"""The ``gpu`` extra's line in pyproject.toml."""


def cuda_major(dockerfile: str) -> int:
    """The CUDA major version of the ``nvidia/cuda`` base image every stage is built from."""
    majors = {int(major) for major in CUDA_BASE.findall(dockerfile)}
    assert len(majors) == 1, f"expected one nvidia/cuda major in the FROM lines, got {majors}"
    return majors.pop()


def ort_gpu_requirement(dockerfile: str) -> Requirement:
    """The one ``onnxruntime-gpu`` requirement that a ``pip install`` line names."""
    requirements = [
        Requirement(word.strip("\"'"))
        for line in PIP_INSTALL.findall(dockerfile)
        for word in line.split()
        if word.strip("\"'").startswith(ORT_GPU)
    ]
    assert len(requirements) == 1, f"expected one pip install of {ORT_GPU}, got {requirements}"
    return requirements[0]


def pin_problem(dockerfile: str) -> str | None:
    """What is wrong with the Dockerfile's ``onnxruntime-gpu`` pin for its base image; None when
    it is an exact pin of a release known to link the base image's CUDA major."""
    requirement = ort_gpu_requirement(dockerfile)
    specifiers = list(requirement.specifier)
    if len(specifiers) != 1 or specifiers[0].operator != "==":
        return f"{requirement} is not an exact == pin"
    version = specifiers[0].version
    if version not in ORT_GPU_CUDA_MAJOR:
        return f"{ORT_GPU} {version} is not in ORT_GPU_CUDA_MAJOR: check its wheel with readelf"
    base, linked = cuda_major(dockerfile), ORT_GPU_CUDA_MAJOR[version]
    if linked != base:
        return f"{ORT_GPU} {version} links CUDA {linked}, the base image has CUDA {base}"
    return None


def test_the_gpu_image_pins_an_onnx_runtime_built_for_its_cuda() -> None:
    assert pin_problem(GPU_DOCKERFILE.read_text(encoding="utf-8")) is None


@pytest.mark.parametrize(
    ("install", "problem"),
    [
        ('"onnxruntime-gpu>=1.18"', "is not an exact == pin"),
        ("onnxruntime-gpu", "is not an exact == pin"),
        ('"onnxruntime-gpu==1.25.1"', "is not in ORT_GPU_CUDA_MAJOR"),
        ('"onnxruntime-gpu==1.27.0"', "links CUDA 13, the base image has CUDA 12"),
    ],
)
def test_a_loose_unknown_or_mismatched_pin_is_a_problem(install: str, problem: str) -> None:
    dockerfile = (
        "FROM nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04 AS build\n"
        f"RUN pip install --no-deps {install}\n"
        "FROM nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04\n"
    )
    assert problem in (pin_problem(dockerfile) or "")


def test_the_gpu_extra_admits_the_pin_and_no_build_for_another_cuda() -> None:
    """``pip install .[gpu]`` on the GPU image's base resolves to a release of the same CUDA
    major as the pin."""
    dockerfile = GPU_DOCKERFILE.read_text(encoding="utf-8")
    pinned = next(iter(ort_gpu_requirement(dockerfile).specifier)).version
    (line,) = GPU_EXTRA.findall(PYPROJECT.read_text(encoding="utf-8"))
    extras = [Requirement(item) for item in re.findall(r'"([^"]+)"', line)]
    (extra,) = [requirement for requirement in extras if requirement.name == ORT_GPU]
    base = cuda_major(dockerfile)
    assert extra.specifier.contains(pinned)
    for version, linked in ORT_GPU_CUDA_MAJOR.items():
        assert extra.specifier.contains(version) == (linked == base), version
