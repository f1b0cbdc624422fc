"""The coarse route's beam: coarse queries walk the HNSW graph with ``FRACTAL_COARSE_EF_SEARCH``,
else with the bundle's measured beam under ``FRACTAL_FIRST_STAGE=bundle``, else with the common
``FRACTAL_HNSW_EF_SEARCH`` that fine queries use; ``/info`` says which. Seen through a filter
that every document matches: the walk reports the efSearch it ran with."""

from __future__ import annotations

from pathlib import Path

import pytest

from client import FractalClient
from index.embedded import FilterParams
from tests.service.helpers import make_settings, serve
from tests.tiny_bundle import build_tiny_bundle

EVERYONE = '{"key": "n", "gte": 0}'
BEAM = {"storage": "flat", "ef_search": 9, "precision": 0.9, "p50_us": 20.0, "p99_us": 30.0}


@pytest.fixture(scope="module")
def measured_bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny bundle whose export measured a coarse beam of 9 for float32 graphs."""
    directory = tmp_path_factory.mktemp("tiny-coarse-beam")
    measured = {
        "dim": 64, "m": 32, "choices": {"flat": BEAM, "sq8": None, "sq4": None}, "points": [BEAM]
    }  # fmt: skip
    build_tiny_bundle(directory, evaluation={"shortlist": {"coarse_beam": measured}})
    return directory


def _walk_ef(settings_dir: Path, tiny_bundle_dir: Path, **settings: str) -> dict[str, object]:
    """The efSearch each granularity's filtered walk ran with, on a service with ``settings``,
    and what ``/info`` says of the coarse beam."""
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
        walks["info"] = client.get("/info").json()["resolutions"]["coarse_beam"]
        return walks


def test_coarse_queries_walk_with_their_own_width(tiny_bundle_dir: Path, tmp_path: Path) -> None:
    walks = _walk_ef(tmp_path / "index", tiny_bundle_dir, coarse_ef_search="7")
    info = {"ef_search": 7, "source": "settings", "measured": None}
    assert walks == {"coarse": 7, "fine": 50, "info": info}


def test_unset_the_coarse_width_is_the_common_one(tiny_bundle_dir: Path, tmp_path: Path) -> None:
    info = {"ef_search": 50, "source": "hnsw_ef_search", "measured": None}
    assert _walk_ef(tmp_path / "index", tiny_bundle_dir) == {"coarse": 50, "fine": 50, "info": info}


def test_the_bundles_measured_beam_applies_when_asked(
    measured_bundle_dir: Path, tmp_path: Path
) -> None:
    walks = _walk_ef(tmp_path / "bundle", measured_bundle_dir, first_stage="bundle")
    info = {"ef_search": 9, "source": "bundle", "measured": BEAM}
    assert walks == {"coarse": 9, "fine": 50, "info": info}
    # Not asked for, the measurement is not used; set, the setting wins over it.
    assert _walk_ef(tmp_path / "default", measured_bundle_dir)["coarse"] == 50
    walks = _walk_ef(
        tmp_path / "set", measured_bundle_dir, first_stage="bundle", coarse_ef_search="7"
    )
    assert (walks["coarse"], walks["info"]["source"]) == (7, "settings")  # type: ignore[index]


def test_a_beam_measured_on_another_graph_is_not_used(
    measured_bundle_dir: Path, tmp_path: Path
) -> None:
    """Other codes, or another degree (the beam was measured at M32)."""
    for name, other in (("codes", {"hnsw_storage": "sq8"}), ("degree", {"hnsw_m": "16"})):
        walks = _walk_ef(tmp_path / name, measured_bundle_dir, first_stage="bundle", **other)
        assert (walks["coarse"], walks["info"]["source"]) == (50, "hnsw_ef_search"), name  # type: ignore[index]


def test_a_width_below_one_is_refused(tiny_bundle_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="coarse_ef_search"):
        make_settings(tiny_bundle_dir, tmp_path, coarse_ef_search="0")
