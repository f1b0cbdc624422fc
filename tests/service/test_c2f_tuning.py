"""``FRACTAL_C2F_TUNING=index``: C2F walks with the efSearch and shortlist factor that ``fractal
tune`` recorded for the served graph, what the environment sets wins, a record of another graph
or an unreadable one is not used, and ``/info`` says which. The walk's efSearch is seen through
a filter that every document matches."""

from __future__ import annotations

import json
from pathlib import Path

from index.embedded import FilterParams
from index.search_tuning import TUNING_FILE
from tests.service.helpers import add_documents, make_settings, serve

TEXTS = [f"document {n} about topic {n % 7}" for n in range(60)]
CHOICE = {"ef_search": 21, "factor": 3, "recall": 0.97, "p50_us": 90.0, "p99_us": 140.0}


def _record(
    index_dir: Path, storage: str = "flat", text: str | None = None, documents: int = 60
) -> None:
    index_dir.mkdir(parents=True, exist_ok=True)
    record = {
        "graph": {"dim": 64, "storage": storage, "m": 32, "documents": documents},
        "k": 10,
        "choices": {"0.95": CHOICE, "0.99": None},
        "points": [CHOICE],
    }
    (index_dir / TUNING_FILE).write_text(text if text is not None else json.dumps(record))


def _c2f(bundle_dir: Path, index_dir: Path, **settings: str) -> dict:
    """What a filtered C2F search and ``/info`` say of C2F's walk, on a service with
    ``settings``: the shortlist size for k 10, the walk's efSearch, and ``/info``'s entry."""
    options = make_settings(bundle_dir, index_dir, index_kinds="hnsw", **settings)
    with serve(options) as client:
        add_documents(client, TEXTS)
        client.app.state.runtime.collection.filters = FilterParams(exact_subset_scale=0.0)
        everyone = '{"key": "position", "gte": 0}'
        params = {"q": "topic 3", "rerank": "c2f", "k": "10", "filter": everyone}
        answer = client.get("/search", params=params)
        assert answer.status_code == 200, answer.text
        route = answer.json()["route"]
        info = client.get("/info").json()["resolutions"]["c2f"]
    return {"shortlist_k": route["shortlist_k"], "ef": route["filter"]["ef_search"], "info": info}


def test_the_recorded_walk_applies_when_asked(tiny_bundle_dir: Path, tmp_path: Path) -> None:
    _record(tmp_path)
    seen = _c2f(tiny_bundle_dir, tmp_path, c2f_tuning="index")
    measured = {**CHOICE, "documents": 60}
    info = {"ef_search": 21, "factor": 3, "source": "index", "measured": measured}
    assert seen == {"shortlist_k": 30, "ef": 21, "info": info}


def test_what_the_environment_sets_wins(tiny_bundle_dir: Path, tmp_path: Path) -> None:
    _record(tmp_path)
    seen = _c2f(tiny_bundle_dir, tmp_path, c2f_tuning="index", c2f_factor="5")
    assert (seen["shortlist_k"], seen["ef"], seen["info"]["source"]) == (50, 21, "index")
    both = {"c2f_factor": "5", "hnsw_ef_search": "40"}
    seen = _c2f(tiny_bundle_dir, tmp_path / "both", c2f_tuning="index", **both)
    assert (seen["shortlist_k"], seen["ef"], seen["info"]["source"]) == (50, 40, "settings")


def test_by_default_the_record_is_not_used(tiny_bundle_dir: Path, tmp_path: Path) -> None:
    _record(tmp_path)
    seen = _c2f(tiny_bundle_dir, tmp_path)
    info = {"ef_search": 128, "factor": 4, "source": "settings", "measured": None}
    assert seen == {"shortlist_k": 40, "ef": 128, "info": info}


def test_a_record_of_another_graph_is_not_used(tiny_bundle_dir: Path, tmp_path: Path) -> None:
    _record(tmp_path, storage="sq8")
    seen = _c2f(tiny_bundle_dir, tmp_path, c2f_tuning="index")
    assert (seen["shortlist_k"], seen["ef"], seen["info"]["source"]) == (40, 128, "settings")


def test_an_unreadable_record_is_logged_and_not_used(
    tiny_bundle_dir: Path, tmp_path: Path, caplog
) -> None:
    _record(tmp_path, text="{not json")
    seen = _c2f(tiny_bundle_dir, tmp_path, c2f_tuning="index")
    assert (seen["shortlist_k"], seen["info"]["source"]) == (40, "settings")
    assert "is not a search tuning record" in caplog.text


def test_a_record_of_a_collection_of_another_size_is_applied_with_a_warning(
    tiny_bundle_dir: Path, tmp_path: Path, caplog
) -> None:
    _record(tmp_path, documents=10)  # the service starts on an empty folder
    seen = _c2f(tiny_bundle_dir, tmp_path, c2f_tuning="index")
    assert (seen["shortlist_k"], seen["info"]["source"]) == (30, "index")
    assert "measured at 10 documents and the collection holds 0" in caplog.text
