"""``docs/settings.md`` documents every setting, and is what ``service.settings_doc`` generates
from the code: a setting added, renamed or re-described without regenerating the page fails here.
"""

from __future__ import annotations

from benchmarks.harness.processes import ROOT
from service.settings import ENV_PREFIX, Settings
from service.settings_doc import render

PAGE = ROOT / "docs" / "settings.md"


def test_the_settings_page_is_what_the_code_generates() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/settings.md is stale: python -m service.settings_doc > docs/settings.md"
    )


def test_every_setting_has_a_described_row() -> None:
    rows = [line for line in render().splitlines() if line.startswith(f"| `{ENV_PREFIX}")]
    assert len(rows) == len(Settings.model_fields)
    for name, field in Settings.model_fields.items():
        assert field.description and field.description.strip(), f"{name} has no description"
        assert any(row.startswith(f"| `{ENV_PREFIX}{name.upper()}` |") for row in rows), name
