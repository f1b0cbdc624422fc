"""Transparent huge pages: when the service starts itself again with glibc's malloc asking for
them, and when it leaves the process as it started."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.huge_pages import TUNABLE, VARIABLE, huge_page_environment, kernel_mode

WANTED = f"{TUNABLE}=1"


@pytest.mark.parametrize("mode", ["always", "madvise"])
def test_glibc_under_a_kernel_with_huge_pages_is_asked_for_them(mode: str) -> None:
    environment = huge_page_environment({"PATH": "/bin"}, "glibc", mode)
    assert environment == {"PATH": "/bin", VARIABLE: WANTED}


def test_other_tunables_are_kept() -> None:
    given = {VARIABLE: "glibc.malloc.arena_max=2"}
    environment = huge_page_environment(given, "glibc", "madvise")
    assert environment == {VARIABLE: f"glibc.malloc.arena_max=2:{WANTED}"}


@pytest.mark.parametrize(
    ("environ", "libc", "mode"),
    [
        ({VARIABLE: f"{TUNABLE}=0"}, "glibc", "madvise"),  # the operator's word wins
        ({VARIABLE: WANTED}, "glibc", "madvise"),  # already restarted: no loop
        ({}, "", "madvise"),  # musl and others: no such tunable
        ({}, "glibc", "never"),
        ({}, "glibc", None),
    ],
)
def test_nothing_changes_where_the_tunable_is_given_or_would_do_nothing(
    environ: dict[str, str], libc: str, mode: str | None
) -> None:
    assert huge_page_environment(environ, libc, mode) is None


def test_the_kernel_mode_is_the_bracketed_word(tmp_path: Path) -> None:
    setting = tmp_path / "enabled"
    setting.write_text("always [madvise] never\n")
    assert kernel_mode(setting) == "madvise"
    assert kernel_mode(tmp_path / "absent") is None
