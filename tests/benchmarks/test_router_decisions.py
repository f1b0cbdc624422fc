"""The offline ``granularity=auto`` scorer the benchmarks use, on tiny torch-free bundles."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.harness.router_decisions import decision_accuracy
from bundle.router import RouterPolicy
from tests.tiny_bundle import TINY_FINE_PARENTS, build_tiny_bundle
from training.evaluation.mixed_queries import MixedQuery

QUERIES = [
    MixedQuery("pay my bill", "fine", 0, 0, ()),
    MixedQuery("book a flight to paris", "fine", 1, 2, ()),
    MixedQuery("set an alarm", "coarse", 2, None, ()),
    MixedQuery("what is my balance", "coarse", 0, None, ()),
]
ALWAYS_COARSE = RouterPolicy(
    features=("fine_max",), mean=(0.0,), scale=(1.0,), weights=(0.0,), bias=5.0, threshold=0.5,
    fine_parents=TINY_FINE_PARENTS,
)  # fmt: skip


def test_every_policy_is_scored_on_the_same_queries(tmp_path: Path) -> None:
    build_tiny_bundle(tmp_path, heads=True, router=ALWAYS_COARSE)
    scores = decision_accuracy(tmp_path, QUERIES)
    assert list(scores) == ["router", "thresholds", "always_coarse", "always_fine"]
    assert scores["router"] == scores["always_coarse"] == {
        "accuracy": 0.5, "coarse_recall": 1.0, "fine_recall": 0.0
    }  # fmt: skip
    assert scores["always_fine"] == {"accuracy": 0.5, "coarse_recall": 0.0, "fine_recall": 1.0}
    thresholds = scores["thresholds"]
    assert thresholds["accuracy"] == pytest.approx(
        (2 * thresholds["coarse_recall"] + 2 * thresholds["fine_recall"]) / 4
    )


def test_a_bundle_without_a_router_has_no_router_row(tmp_path: Path) -> None:
    build_tiny_bundle(tmp_path, heads=True)
    assert "router" not in decision_accuracy(tmp_path, QUERIES)
