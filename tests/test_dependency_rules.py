"""The dependency rules of ``docs/architecture.md``: every module's imports, read from its source
(module level and inside functions alike), go only where its package may go.

- ``bundle`` and ``client`` import no other package of the project;
- ``encoding`` and ``index`` only ``bundle``;
- ``service`` only ``bundle``, ``encoding`` and ``index``;
- ``bulk`` only ``bundle``, ``encoding``, ``index`` and ``client``;
- ``training`` anything but ``service``.
"""

from __future__ import annotations

import ast

import pytest

from benchmarks.harness.processes import ROOT

PROJECT = ("bundle", "bulk", "client", "encoding", "index", "service", "training")
ALLOWED = {
    "bundle": set(),
    "client": set(),
    "encoding": {"bundle"},
    "index": {"bundle"},
    "service": {"bundle", "encoding", "index"},
    "bulk": {"bundle", "client", "encoding", "index"},
    "training": set(PROJECT) - {"service", "training"},
}


def _imported_packages(source: str) -> set[str]:
    """The project packages a module's source imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found |= {name.split(".")[0] for name in names} & set(PROJECT)
    return found


def test_the_reader_finds_imports_anywhere_in_a_module() -> None:
    source = "import index.types\nfrom bundle import x\ndef f():\n    from service import app\n"
    assert _imported_packages(source) == {"index", "bundle", "service"}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_what_the_rules_allow(package: str) -> None:
    broken = {}
    for module in sorted((ROOT / package).rglob("*.py")):
        wrong = _imported_packages(module.read_text(encoding="utf-8")) - ALLOWED[package] - {
            package
        }
        if wrong:
            broken[module.relative_to(ROOT).as_posix()] = sorted(wrong)
    assert not broken, f"imports that break docs/architecture.md's dependency rules: {broken}"
