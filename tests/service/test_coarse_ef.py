"""``FRACTAL_COARSE_EF_SEARCH``: coarse queries walk the HNSW graph with their own beam width,
fine queries with ``FRACTAL_HNSW_EF_SEARCH``; unset, coarse takes the common one. Seen through
a filter that every document matches: the walk reports the efSearch it ran with."""

from __future__ import annotations

from pathlib import Path

import pytest

from client import FractalClient
from index.embedded import FilterParams
from tests.service.helpers import make_settings, serve

EVERYONE = '{"key": "n", "gte": 0}'


def _walk_ef(settings_dir: Path, tiny_bundle_dir: Path, **settings: str) -> dict[str, int]:
    """The efSearch each granularity's filtered walk ran with, on a service with ``settings``."""
    options = make_settings(
        tiny_bundle_dir, settings_dir, index_kinds="hnsw", hnsw_ef_search="50", **settings
    )
    with serve(options) as client:
        FractalClient(client).add_documents(
            [
                {"text": f"document {n} {'xyz'[n % 3] * (n % 7)}", "metadata": {"n": n}}
                for n in range(60)
            ],
            batch_size=60,
        )
        # Every filter through the graph walk, however few documents match.
        client.app.state.runtime.collection.filters = FilterParams(exact_subset_scale=0.0)
        walks = {}
        for granularity in ("coarse", "fine"):
            params = {"q": "document 7", "granularity": granularity, "filter": EVERYONE}
            answer = client.get("/search", params=params)
            assert answer.status_code == 200, answer.text
            report = answer.json()["route"]["filter"]
            assert report["mode"] == "selector" and report["matching"] == 60
            walks[granularity] = report["ef_search"]
        return walks


def test_coarse_queries_walk_with_their_own_width(tiny_bundle_dir: Path, tmp_path: Path) -> None:
    walks = _walk_ef(tmp_path / "index", tiny_bundle_dir, coarse_ef_search="7")
    assert walks == {"coarse": 7, "fine": 50}


def test_unset_the_coarse_width_is_the_common_one(tiny_bundle_dir: Path, tmp_path: Path) -> None:
    assert _walk_ef(tmp_path / "index", tiny_bundle_dir) == {"coarse": 50, "fine": 50}


def test_a_width_below_one_is_refused(tiny_bundle_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="coarse_ef_search"):
        make_settings(tiny_bundle_dir, tmp_path, coarse_ef_search="0")
