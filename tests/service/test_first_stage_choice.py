"""C2F's first stage from a measurement: the bundle's (``FRACTAL_FIRST_STAGE=bundle``) or the
collection's own (``FRACTAL_FIRST_STAGE=index``, ``fractal tune --first-stages``'s record): its
prefix, codes and degree build the graphs, what the environment sets wins, and ``/info`` says
which."""

from __future__ import annotations

from pathlib import Path

import pytest

from index import native_funnel
from index.search_tuning import FIRST_STAGES_FILE, write_record
from service.errors import StartupError
from service.startup import load_runtime
from tests.service.helpers import add_documents, make_settings, serve
from tests.tiny_bundle import build_tiny_bundle

TEXTS = [f"document number {i} about topic {i % 7} and colour {i % 5}" for i in range(60)]
CHOICE = {
    "dim": 192, "storage": "sq4", "m": 12, "ef_search": 32, "factor": 4,
    "recall": 0.96, "p50_us": 80.0, "p99_us": 120.0, "resident_bytes_per_doc": 200.0,
}


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tiny-first-stage")
    measured = {"choices": {"0.95": CHOICE, "0.99": None}, "points": [CHOICE]}
    build_tiny_bundle(
        directory, shortlist_dim=128, evaluation={"shortlist": {"first_stage": measured}}
    )
    return directory


def _info(bundle_dir: Path, index_dir: Path, **settings: object) -> dict:
    with serve(make_settings(bundle_dir, index_dir, index_kinds="hnsw", **settings)) as client:
        add_documents(client, TEXTS)
        route = client.get("/search", params={"q": "topic 3", "rerank": "c2f"}).json()["route"]
        info = client.get("/info").json()
    return {"route": route, **info}


def test_the_bundle_choice_builds_the_graphs_and_info_says_so(
    bundle_dir: Path, tmp_path: Path
) -> None:
    info = _info(bundle_dir, tmp_path, first_stage="bundle")
    first_stage = info["resolutions"]["first_stage"]
    assert first_stage == {
        "source": "bundle", "shortlist_dim": 192, "hnsw_storage": "sq4", "hnsw_m": 12,
        "walk": "faiss", "measured": CHOICE, "index_choice": None,
    }
    assert info["resolutions"]["shortlist_dim"] == 192
    assert info["route"]["shortlist_dimension"] == 192
    graph = next(i for i in info["indexes"] if i["dimension"] == 192 and i["kind"] == "hnsw")
    assert graph["vectors"] == len(TEXTS)


def test_the_environment_overrides_the_choice_field_by_field(
    bundle_dir: Path, tmp_path: Path
) -> None:
    info = _info(bundle_dir, tmp_path, first_stage="bundle", hnsw_m=20)
    first_stage = info["resolutions"]["first_stage"]
    assert (first_stage["hnsw_storage"], first_stage["hnsw_m"]) == ("sq4", 20)


def test_by_default_the_settings_decide(bundle_dir: Path, tmp_path: Path) -> None:
    info = _info(bundle_dir, tmp_path)
    assert info["resolutions"]["first_stage"] == {
        "source": "settings", "shortlist_dim": 128, "hnsw_storage": "flat", "hnsw_m": 32,
        "walk": native_funnel.walk("flat"), "measured": None, "index_choice": None,
    }
    assert info["route"]["shortlist_dimension"] == 128


def test_info_shows_the_first_stage_measured_on_the_collection_beside_the_one_in_use(
    bundle_dir: Path, tmp_path: Path
) -> None:
    record = {"documents": 5000, "choices": {"0.95": {**CHOICE, "dim": 128}, "0.99": None}}
    write_record(tmp_path / FIRST_STAGES_FILE, record)
    first_stage = _info(bundle_dir, tmp_path)["resolutions"]["first_stage"]
    assert first_stage["index_choice"] == {**CHOICE, "dim": 128, "documents": 5000}
    assert (first_stage["source"], first_stage["shortlist_dim"]) == ("settings", 128)
    at_99 = _info(bundle_dir, tmp_path, first_stage_recall=0.99)["resolutions"]["first_stage"]
    assert at_99["index_choice"] is None  # no first stage reached 0.99 there


def test_an_unreadable_first_stage_record_is_logged_and_not_shown(
    bundle_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / FIRST_STAGES_FILE).write_text("{not json", encoding="utf-8")
    first_stage = _info(bundle_dir, tmp_path)["resolutions"]["first_stage"]
    assert first_stage["index_choice"] is None
    assert "is not a first-stage record" in caplog.text


def test_a_floor_that_was_not_measured_is_refused(bundle_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="first_stage_recall must be 0.95 or 0.99"):
        make_settings(bundle_dir, tmp_path, first_stage_recall=0.9)


RECORDED = {**CHOICE, "dim": 64, "storage": "sq8", "m": 16}
"""What ``fractal tune --first-stages`` measured on the collection: not the bundle's choice."""


def _graph(info: dict, dim: int) -> dict | None:
    return next((i for i in info["indexes"] if (i["dimension"], i["kind"]) == (dim, "hnsw")), None)


def test_the_collections_own_measurement_builds_its_graphs_and_info_says_so(
    bundle_dir: Path, tmp_path: Path
) -> None:
    write_record(tmp_path / FIRST_STAGES_FILE, {"documents": 60, "choices": {"0.95": RECORDED}})
    info = _info(bundle_dir, tmp_path, first_stage="index")
    measured = {**RECORDED, "documents": 60}
    assert info["resolutions"]["first_stage"] == {
        "source": "index", "shortlist_dim": 64, "hnsw_storage": "sq8", "hnsw_m": 16,
        "walk": native_funnel.walk("sq8"), "measured": measured, "index_choice": measured,
    }
    assert info["route"]["shortlist_dimension"] == 64
    assert _graph(info, 64)["vectors"] == len(TEXTS)
    assert _graph(info, 192) is None  # the bundle's choice is not built


def test_an_8_bit_graph_is_walked_natively_unless_the_settings_say_not(
    bundle_dir: Path, tmp_path: Path
) -> None:
    native = _info(bundle_dir, tmp_path / "native", hnsw_storage="sq8u")
    assert native["resolutions"]["first_stage"]["walk"] == native_funnel.walk("sq8u")
    off = _info(bundle_dir, tmp_path / "off", hnsw_storage="sq8u", hnsw_native_walk=False)
    assert off["resolutions"]["first_stage"]["walk"] == "faiss"
    assert off["route"] == native["route"]


def test_without_a_record_of_its_own_a_collection_takes_the_bundles_choice(
    bundle_dir: Path, tmp_path: Path
) -> None:
    first_stage = _info(bundle_dir, tmp_path, first_stage="index")["resolutions"]["first_stage"]
    assert (first_stage["source"], first_stage["shortlist_dim"]) == ("bundle", 192)
    assert first_stage["measured"] == CHOICE


def test_a_collection_served_with_another_graph_has_it_rebuilt_from_its_documents(
    bundle_dir: Path, tmp_path: Path
) -> None:
    """The graph the settings built is snapshotted at shutdown; after the measurement the next
    start builds the measured one from the stored vectors, and every document is found."""
    with serve(make_settings(bundle_dir, tmp_path, index_kinds="hnsw")) as client:
        ids = add_documents(client, TEXTS)
    write_record(tmp_path / FIRST_STAGES_FILE, {"documents": 60, "choices": {"0.95": RECORDED}})
    settings = make_settings(bundle_dir, tmp_path, index_kinds="hnsw", first_stage="index")
    with serve(settings) as client:
        info = client.get("/info").json()
        body = client.get("/search", params={"q": TEXTS[17], "rerank": "c2f", "k": 1}).json()
    assert info["documents"] == len(TEXTS)
    assert (_graph(info, 64)["vectors"], _graph(info, 128)) == (len(TEXTS), None)
    assert body["route"]["shortlist_dimension"] == 64
    assert body["hits"][0]["id"] == ids[17]


def test_a_record_naming_a_graph_the_bundle_cannot_serve_stops_the_start(
    bundle_dir: Path, tmp_path: Path
) -> None:
    record = {"documents": 60, "choices": {"0.95": {**RECORDED, "dim": 96}}}
    write_record(tmp_path / FIRST_STAGES_FILE, record)
    settings = make_settings(bundle_dir, tmp_path, index_kinds="hnsw", first_stage="index")
    with pytest.raises(StartupError, match="chose a 96-d sq8 graph of degree 16.*fractal tune"):
        load_runtime(settings)


def test_a_first_stage_measured_at_another_size_is_served_with_a_warning(
    bundle_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_record(tmp_path / FIRST_STAGES_FILE, {"documents": 5000, "choices": {"0.95": RECORDED}})
    with serve(make_settings(bundle_dir, tmp_path, index_kinds="hnsw", first_stage="index")):
        pass
    assert "was measured at 5000 documents and the collection holds 0" in caplog.text
