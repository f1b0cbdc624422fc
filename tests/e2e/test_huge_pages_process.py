"""A real ``python -m service`` process starts itself again asking for huge pages, keeping its
process id, unless ``FRACTAL_HUGE_PAGES=false``; either way it serves."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks.harness.processes import ServiceProcess
from service.huge_pages import TUNABLE, huge_page_environment, kernel_mode


def _environment(server: ServiceProcess) -> list[str]:
    """The environment the process id runs with now (after any exec)."""
    raw = Path(f"/proc/{server.process.pid}/environ").read_bytes()
    return raw.decode(errors="replace").split("\0")


@pytest.mark.parametrize("huge_pages", ["true", "false"])
def test_the_service_asks_for_huge_pages_unless_told_not_to(
    launch: Callable[..., ServiceProcess],
    identity_bundle_dir: Path,
    tmp_path: Path,
    huge_pages: str,
) -> None:
    index = tmp_path / "index"
    server = launch(identity_bundle_dir, index, huge_pages=huge_pages, log_level="info")
    with server.client() as client:
        assert client.get("/ready").status_code == 200
    offered = huge_page_environment({}, platform.libc_ver()[0], kernel_mode()) is not None
    given = TUNABLE in os.environ.get("GLIBC_TUNABLES", "")
    asked = any(TUNABLE + "=1" in line for line in _environment(server) if "GLIBC" in line)
    assert asked == (huge_pages == "true" and offered and not given)
    log = server.log.read_text(encoding="utf-8")
    said = "asks for them" if asked else "does not ask"
    assert f"transparent huge pages: kernel mode {kernel_mode() or 'absent'}, malloc {said}" in log
