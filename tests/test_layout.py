"""``docs/architecture.md``'s layout names every package and module of the project, and nothing
that is not there: a module added, moved or removed without the map fails here.

The layout is the first fenced block under the page's "Layout" heading. Each entry is a line that
starts with a path (a folder ending in ``/``, or a file), relative to the repository root; lines
that start with white space continue the entry above.
"""

from __future__ import annotations

import re

from benchmarks.harness.processes import ROOT

PAGE = ROOT / "docs" / "architecture.md"
PACKAGES = ("bundle", "bulk", "client", "encoding", "index", "service", "training")
"""The Python packages whose every module the map names (and their subpackages)."""
TOP_LEVEL = ("benchmarks/", "docker/", "docker-compose.yml", "docs/", "openapi/", "tests/")


def _listed() -> set[str]:
    text = PAGE.read_text(encoding="utf-8")
    layout = re.search(r"^#+ .*Layout.*$", text, re.MULTILINE | re.IGNORECASE)
    assert layout, "docs/architecture.md has no Layout heading"
    block = re.search(r"^```[^\n]*\n(.*?)^```", text[layout.end() :], re.MULTILINE | re.DOTALL)
    assert block, "no fenced block under the Layout heading"
    return {line.split()[0] for line in block.group(1).splitlines() if line[:1].strip()}


def _present() -> set[str]:
    paths = set()
    for package in PACKAGES:
        for module in (ROOT / package).rglob("*.py"):
            folder = module.parent.relative_to(ROOT).as_posix()
            paths.add(f"{folder}/")
            if module.name != "__init__.py":  # the folder's entry stands for it
                paths.add(module.relative_to(ROOT).as_posix())
    return paths


def test_the_layout_names_every_package_and_module() -> None:
    missing = sorted(_present() - _listed())
    assert not missing, f"docs/architecture.md's layout does not name: {missing}"
    absent = sorted(set(TOP_LEVEL) - _listed())
    assert not absent, f"docs/architecture.md's layout does not name: {absent}"


def test_every_path_the_layout_names_exists() -> None:
    stale = sorted(path for path in _listed() if not (ROOT / path.rstrip("/")).exists())
    assert not stale, f"docs/architecture.md's layout names what is not there: {stale}"
