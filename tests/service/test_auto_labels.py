"""``granularity=auto`` names the labels the heads chose by their paths from the root, read from
the manifest's parents; a manifest without parents shows bare names. Torch-free: the tiny bundle
with heads that pick fixed labels."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from bundle import HierarchyLevel
from service.settings import Settings
from tests.service.helpers import add_documents, serve
from tests.tiny_bundle import add_fixed_heads, build_tiny_bundle

TYPES = HierarchyLevel("type", ("ENTY", "LOC", "NUM"))
DETAILS = HierarchyLevel("detail", ("city", "other", "other", "other"), (1, 0, 1, 2))


def _auto_route(settings: Settings, query: str) -> dict:
    with serve(settings) as client:
        add_documents(client, ["what is the speed of light", "which city hosts the louvre"])
        response = client.get("/search", params={"q": query, "k": 2, "granularity": "auto"})
        assert response.status_code == 200, response.text
        return response.json()["route"]["auto"]


@pytest.mark.parametrize(
    ("hierarchy", "fine_choice", "labels"),
    [
        ((TYPES, DETAILS), 3, ("NUM", "NUM / other")),
        ((TYPES, DETAILS), 1, ("NUM", "ENTY / other")),
        # Written before parents were recorded: the label's own name.
        ((TYPES, HierarchyLevel("detail", ("city", "other"))), 1, ("NUM", "other")),
    ],
)
def test_auto_shows_the_chosen_labels_paths(
    tmp_path: Path,
    settings_for: Callable[..., Settings],
    hierarchy: tuple[HierarchyLevel, ...],
    fine_choice: int,
    labels: tuple[str, str],
) -> None:
    bundle_dir = tmp_path / "bundle"
    build_tiny_bundle(bundle_dir)
    add_fixed_heads(bundle_dir, hierarchy, coarse_choice=2, fine_choice=fine_choice)
    auto = _auto_route(settings_for(bundle_dir, index_kinds="exact"), "how hot is venus")
    assert auto["decision"] == "fine" and auto["fine_confidence"] > 0.99
    assert (auto["coarse_label"], auto["fine_label"]) == labels
