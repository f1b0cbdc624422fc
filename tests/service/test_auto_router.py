"""``granularity=auto`` with and without the bundle's ``router.json``, on tiny torch-free bundles
with heads (:func:`tests.tiny_bundle.build_tiny_bundle`): a router decides and says so, a bundle
without one keeps the threshold policy, a router that does not fit the bundle stops start-up."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest

from bundle import load_bundle
from bundle.router import RouterPolicy
from service.errors import StartupError
from service.granularity import GranularityRouter
from service.settings import Settings
from service.startup import load_runtime
from tests.service.helpers import serve
from tests.tiny_bundle import TINY_FINE_PARENTS, build_tiny_bundle
from training.bundle_embeddings import onnx_embeddings

QUERIES = [
    "pay my bill",
    "book a flight to paris",
    "set an alarm",
    "what is my balance",
    "lost my luggage",
    "a",
    "timer for ten minutes please",
    "transfer money",
]
FINE_MAX_CUT = 0.6
STEEPNESS = 30.0
# P(coarse) = σ(−30 · (fine_max − 0.6)): coarse exactly when the fine head's confidence ≤ 0.6.
POLICY = RouterPolicy(
    features=("fine_max",),
    mean=(FINE_MAX_CUT,),
    scale=(1.0,),
    weights=(-STEEPNESS,),
    bias=0.0,
    threshold=0.5,
    fine_parents=TINY_FINE_PARENTS,
    fit={"construction": "hand-made"},
)


@pytest.fixture(scope="module")
def routed_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tiny-routed")
    build_tiny_bundle(directory, heads=True, router=POLICY)
    return directory


@pytest.fixture(scope="module")
def heads_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tiny-heads")
    build_tiny_bundle(directory, heads=True)
    return directory


def _auto(client, queries: list[str]) -> list[dict]:
    body = client.post("/search", json={"queries": queries, "granularity": "auto"}).json()
    return [result["route"] for result in body["results"]]


def test_a_bundle_with_a_router_routes_by_it_and_says_so(
    routed_bundle: Path, settings_for: Callable[..., Settings]
) -> None:
    with serve(settings_for(routed_bundle)) as client:
        assert client.get("/info").json()["auto_routing"]["policy"] == "router"
        routes = _auto(client, QUERIES)
    decisions = set()
    for route in routes:
        auto = route["auto"]
        probability = 1 / (1 + math.exp(STEEPNESS * (auto["fine_confidence"] - FINE_MAX_CUT)))
        expected = "coarse" if probability >= 0.5 else "fine"
        relation = ">=" if expected == "coarse" else "<"
        assert auto["reason"] == f"router.json: P(coarse) = {probability:.3f} {relation} 0.5"
        assert auto["decision"] == route["granularity"] == expected
        assert route["dimension"] == (64 if expected == "coarse" else 384)
        assert auto["coarse_label"] in ("banking", "travel", "utility") and auto["fine_label"]
        decisions.add(expected)
    assert decisions == {"coarse", "fine"}  # the queries exercise both sides


def test_a_bundle_without_a_router_keeps_the_thresholds(
    heads_bundle: Path, settings_for: Callable[..., Settings]
) -> None:
    settings = settings_for(heads_bundle, auto_fine_threshold=0.6, auto_coarse_threshold=0.5)
    with serve(settings) as client:
        assert client.get("/info").json()["auto_routing"] == {
            "heads": True, "policy": "thresholds", "fine_threshold": 0.6, "coarse_threshold": 0.5,
        }  # fmt: skip
        routes = _auto(client, QUERIES)
    reasons = set()
    for route in routes:
        auto = route["auto"]
        fine_sure, coarse_sure = auto["fine_confidence"] >= 0.6, auto["coarse_confidence"] >= 0.5
        expected = "fine" if fine_sure or not coarse_sure else "coarse"
        assert auto["decision"] == expected, auto
        assert not auto["reason"].startswith("router.json")
        reasons.add(auto["reason"].split(" (")[0])
    assert reasons == {"fine head confident", "fine head unsure", "both heads unsure"}


def test_the_router_can_be_set_aside_to_compare_policies(routed_bundle: Path) -> None:
    manifest = load_bundle(routed_bundle)
    vectors = onnx_embeddings(routed_bundle, QUERIES)
    routed = GranularityRouter(routed_bundle, manifest, 0.6, 0.5)
    thresholds = GranularityRouter(routed_bundle, manifest, 0.6, 0.5, use_router_file=False)
    assert (routed.policy, thresholds.policy) == ("router", "thresholds")
    for learned, fixed in zip(routed.decide(vectors), thresholds.decide(vectors), strict=True):
        assert learned.reason.startswith("router.json: P(coarse) = ")
        assert not fixed.reason.startswith("router.json")
        assert learned.fine_confidence == fixed.fine_confidence


def test_the_identity_bundle_reports_the_fine_policy(
    tiny_bundle_dir: Path, settings_for: Callable[..., Settings]
) -> None:
    with serve(settings_for(tiny_bundle_dir)) as client:
        assert client.get("/info").json()["auto_routing"]["policy"] == "fine"


def test_a_router_that_does_not_fit_the_bundle_stops_start_up(
    tmp_path: Path, settings_for: Callable[..., Settings]
) -> None:
    misfit = RouterPolicy(**{**POLICY.__dict__, "fine_parents": (0, 1, 2)})
    build_tiny_bundle(tmp_path / "bundle", heads=True, router=misfit)
    with pytest.raises(StartupError, match="router.json: fine_parents has 3 entries"):
        load_runtime(settings_for(tmp_path / "bundle"))
