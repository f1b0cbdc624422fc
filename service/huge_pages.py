"""The service's memory in transparent huge pages, where the kernel offers them.

A graph walk reads a few hundred nodes scattered over the whole index, so at a million documents
nearly every read of a code or a neighbour list also misses the TLB, and the walk waits on the
page tables as well as on memory. With 2 MiB pages one TLB entry covers 512 times the memory.
Linux backs anonymous memory with them when the process asks (``transparent_hugepage`` mode
``madvise``) or for every large enough region (``always``). FAISS allocates its graphs and
codes with ``malloc``, and glibc's malloc asks for huge pages when its ``glibc.malloc.hugetlb``
tunable is 1 (glibc 2.35 and later). A tunable is read once, when the process starts, so the
service starts itself again with it set (:func:`restart_with_huge_pages`) before it loads
anything: the same process id, arguments and environment, plus the tunable.

``FRACTAL_HUGE_PAGES=false`` leaves the process as it started; so does an environment whose
``GLIBC_TUNABLES`` already says anything about ``glibc.malloc.hugetlb`` (the operator's word
wins), a C library other than glibc, and a kernel without transparent huge pages (then the
tunable would change nothing).
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path

TUNABLE = "glibc.malloc.hugetlb"
VARIABLE = "GLIBC_TUNABLES"
THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def kernel_mode(path: Path = THP_MODE) -> str | None:
    """The kernel's transparent huge page mode (``always``, ``madvise`` or ``never``), or None
    where the kernel has no such setting."""
    try:
        text = path.read_text(encoding="ascii")
    except OSError:
        return None
    chosen = [word[1:-1] for word in text.split() if word.startswith("[")]
    return chosen[0] if chosen else None


def huge_page_environment(
    environ: Mapping[str, str], libc: str, mode: str | None
) -> dict[str, str] | None:
    """``environ`` with glibc's malloc told to ask for huge pages, or None where there is
    nothing to change: the tunable already given (either way), not glibc, or a kernel that
    backs no anonymous memory with huge pages (``mode`` None or ``never``)."""
    given = environ.get(VARIABLE, "")
    if libc != "glibc" or mode in (None, "never") or TUNABLE in given:
        return None
    tunables = f"{given}:{TUNABLE}=1" if given else f"{TUNABLE}=1"
    return {**environ, VARIABLE: tunables}


def restart_with_huge_pages() -> None:
    """Replace this process by itself started with the tunable (see the module docstring);
    return without doing anything where :func:`huge_page_environment` changes nothing."""
    environment = huge_page_environment(os.environ, platform.libc_ver()[0], kernel_mode())
    if environment is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, environment)


def requested() -> bool:
    """Whether this process started with glibc's malloc asking for huge pages."""
    return f"{TUNABLE}=1" in os.environ.get(VARIABLE, "").split(":")
