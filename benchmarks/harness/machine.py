"""The machine section of every results file: what ran the benchmark and how loaded it was.

Library versions come from the installed distributions' metadata, so that naming torch's version
does not import torch into a benchmark that does not use it.
"""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import datetime, timezone
from importlib import metadata

LIBRARIES = ("numpy", "faiss", "onnxruntime", "torch")
"""Import names whose installed version is recorded (when installed)."""
SIMD_PREFIXES = ("sse", "ssse", "avx", "fma", "f16c", "amx")
"""CPU flags that decide which FAISS, NumPy and ONNX Runtime kernels run."""


def _lscpu() -> dict[str, str]:
    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    return {
        key.strip(): value.strip()
        for key, _, value in (line.partition(":") for line in lines.splitlines())
    }


def _version(import_name: str) -> str | None:
    """The version of the distribution that provides ``import_name``; None when not installed."""
    for distribution in metadata.packages_distributions().get(import_name, []):
        return metadata.version(distribution)
    return None


def cpu_flags() -> list[str]:
    """The CPU's feature flags as the kernel reports them (``lscpu``, from ``/proc/cpuinfo``)."""
    return _lscpu().get("Flags", "").split()


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run_stamp(cpu: dict[str, str] | None = None) -> dict:
    """The date, CPU model and load average now: the record one run keeps of itself inside a
    benchmark whose runs span sessions, where each invocation rewrites the machine section."""
    cpu = _lscpu() if cpu is None else cpu
    return {
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cpu_model": cpu.get("Model name") or platform.processor() or "unknown",
        "load_average_1_5_15_min_at_start": load_average(),
    }


def machine_section() -> dict:
    """The date, CPU model and SIMD flags, cores, load average now, and library versions."""
    cpu = _lscpu()
    flags = cpu.get("Flags", "").split()
    section: dict = {
        **run_stamp(cpu),
        "cpu_simd_flags": [flag for flag in flags if flag.startswith(SIMD_PREFIXES)],
        "cpu_cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }
    versions = {name: _version(name) for name in LIBRARIES}
    return section | {name: version for name, version in versions.items() if version}
