"""``router.json`` on its own: the features on hand-made logits, the policy's arithmetic, the JSON
round trip and every way a router file or its fit to the bundle is refused."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bundle import BundleError, load_bundle
from bundle.router import (
    FEATURE_NAMES,
    ROUTER_FILE,
    RouterPolicy,
    load_router,
    read_router,
    router_features,
    write_router,
)
from tests.tiny_bundle import TINY_FINE_PARENTS, build_tiny_bundle

# Two coarse labels; fine labels 0, 1 under coarse 0 and 2, 3 under coarse 1.
PARENTS = (0, 0, 1, 1)


def _features(coarse: list[float], fine: list[float]) -> dict[str, float]:
    """Features of one query whose heads gave these *probabilities* (log → logits)."""
    values = router_features(np.log([coarse]), np.log([fine]), PARENTS)
    assert values.shape == (1, len(FEATURE_NAMES))
    return dict(zip(FEATURE_NAMES, values[0].tolist(), strict=True))


def test_features_of_a_query_spread_over_one_domain() -> None:
    got = _features([0.8, 0.2], [0.4, 0.3, 0.2, 0.1])
    entropy = -sum(p * math.log(p) for p in (0.4, 0.3, 0.2, 0.1))
    within = -(4 / 7 * math.log(4 / 7) + 3 / 7 * math.log(3 / 7)) / math.log(2)
    expected = {
        "coarse_max": 0.8,
        "coarse_margin": 0.6,
        "coarse_entropy": -(0.8 * math.log(0.8) + 0.2 * math.log(0.2)) / math.log(2),
        "fine_max": 0.4,
        "fine_margin": 0.1,
        "fine_entropy": entropy / math.log(4),
        "fine_top2_same_parent": 1.0,
        "fine_top3_same_parent": 0.0,
        "heads_agree": 1.0,
        "fine_parent_mass": 0.7,
        "fine_share_of_parent": 0.4 / 0.7,
        "fine_entropy_within_parent": within,
        "coarse_prob_of_fine_parent": 0.8,
        "coarse_fine_overlap": math.sqrt(0.8 * 0.7) + math.sqrt(0.2 * 0.3),
    }
    assert got == pytest.approx(expected, abs=1e-9)


def test_features_of_a_query_sure_of_one_intent_the_heads_disagree_on() -> None:
    got = _features([0.9, 0.1], [0.01, 0.02, 0.94, 0.03])
    assert got["fine_max"] == pytest.approx(0.94)
    assert got["fine_top2_same_parent"] == 1.0  # labels 2 and 3
    assert got["fine_top3_same_parent"] == 0.0  # then label 1, under the other domain
    assert got["heads_agree"] == 0.0
    assert got["fine_parent_mass"] == pytest.approx(0.97)
    assert got["fine_share_of_parent"] == pytest.approx(0.94 / 0.97)
    assert got["coarse_prob_of_fine_parent"] == pytest.approx(0.1)


def test_features_by_name_and_batched() -> None:
    coarse = np.log([[0.8, 0.2], [0.3, 0.7]])
    fine = np.log([[0.4, 0.3, 0.2, 0.1], [0.1, 0.1, 0.1, 0.7]])
    both = router_features(coarse, fine, PARENTS, ("fine_max", "heads_agree"))
    assert both == pytest.approx(np.array([[0.4, 1.0], [0.7, 1.0]]))
    assert router_features(coarse, fine, PARENTS)[1] == pytest.approx(
        router_features(coarse[1:], fine[1:], PARENTS)[0]
    )


@pytest.mark.parametrize(
    ("coarse", "fine", "parents", "message"),
    [
        (np.zeros((2, 2)), np.zeros((3, 4)), PARENTS, "one batch"),
        (np.zeros((2, 2)), np.zeros((2, 4)), (0, 0, 1), "fine_parents has"),
        (np.zeros((2, 2)), np.zeros((2, 4)), (0, 0, 1, 2), "coarse label ids < 2"),
        (np.zeros((2, 1)), np.zeros((2, 4)), (0, 0, 0, 0), "at least two labels"),
    ],
)
def test_features_refuse_inconsistent_inputs(
    coarse: np.ndarray, fine: np.ndarray, parents: tuple, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        router_features(coarse, fine, parents)


def _policy(**changes: object) -> RouterPolicy:
    count = len(FEATURE_NAMES)
    fields: dict = {
        "features": FEATURE_NAMES,
        "mean": (0.5,) * count,
        "scale": (0.25,) * count,
        "weights": tuple(np.linspace(-1, 1, count).tolist()),
        "bias": 0.3,
        "threshold": 0.5,
        "fine_parents": PARENTS,
        "fit": {"construction": "join", "accuracy": 0.9},
    }
    fields.update(changes)
    return RouterPolicy(**fields)


def test_probability_is_the_logistic_of_the_standardised_features() -> None:
    policy = _policy()
    coarse, fine = np.log([[0.8, 0.2]]), np.log([[0.4, 0.3, 0.2, 0.1]])
    features = router_features(coarse, fine, PARENTS)[0]
    score = 0.3 + sum(w * (x - 0.5) / 0.25 for w, x in zip(policy.weights, features, strict=True))
    assert policy.coarse_probability(coarse, fine) == pytest.approx([1 / (1 + math.exp(-score))])


def test_a_subset_of_features_in_any_order() -> None:
    policy = _policy(
        features=("fine_share_of_parent", "coarse_max"), mean=(0, 0), scale=(1, 1),
        weights=(-2.0, 1.0), bias=0.0,
    )  # fmt: skip
    coarse, fine = np.log([[0.8, 0.2]]), np.log([[0.4, 0.3, 0.2, 0.1]])
    score = -2.0 * 0.4 / 0.7 + 0.8
    assert policy.coarse_probability(coarse, fine) == pytest.approx([1 / (1 + math.exp(-score))])


def test_json_round_trip(tmp_path: Path) -> None:
    policy = _policy()
    write_router(tmp_path / ROUTER_FILE, policy)
    data = json.loads((tmp_path / ROUTER_FILE).read_text(encoding="utf-8"))
    assert data["format"] == "fractal-router" and data["version"] == 1
    assert data["features"] == list(FEATURE_NAMES)
    assert read_router(tmp_path / ROUTER_FILE) == policy


def _broken(change: dict | None = None, drop: str | None = None) -> dict:
    data = {**_policy().to_json(), **(change or {})}
    if drop:
        del data[drop]
    return data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "must hold a JSON object"),
        (_broken({"version": 2}), "version 2; this reader reads 'fractal-router' version 1"),
        (_broken({"model": "mlp"}), "model 'mlp' is not 'logistic_regression'"),
        (_broken(drop="bias"), r"missing field\(s\) \['bias'\]"),
        (_broken({"extra": 1}), r"unknown field\(s\) \['extra'\]"),
        (_broken({"features": "fine_max"}), "features must be a list"),
        (_broken({"features": ["fine_max", "loudness"]}), "unknown: \\['loudness'\\]"),
        (_broken({"mean": [0.0]}), "mean must hold 14 finite numbers"),
        (_broken({"weights": [float("nan")] * 14}), "weights must hold 14 finite numbers"),
        (_broken({"scale": [0.0] * 14}), "scale must be positive"),
        (_broken({"bias": "high"}), "bias must be a finite number"),
        (_broken({"threshold": 1.0}), "threshold must be a probability strictly between"),
        (_broken({"fine_parents": [0, -1, 1, 1]}), "fine_parents must list a coarse label id"),
        (_broken({"fine_parents": [0, 0.5, 1, 1]}), "fine_parents must list a coarse label id"),
        (_broken({"fit": [1]}), "fit must be an object"),
    ],
)
def test_malformed_router_files_are_refused_with_a_clear_message(
    tmp_path: Path, data: object, message: str
) -> None:
    path = tmp_path / ROUTER_FILE
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(BundleError, match=rf"^{ROUTER_FILE}: .*{message}"):
        read_router(path)


def test_unreadable_router_file(tmp_path: Path) -> None:
    (tmp_path / ROUTER_FILE).write_text("{not json", encoding="utf-8")
    with pytest.raises(BundleError, match="cannot be read as JSON"):
        read_router(tmp_path / ROUTER_FILE)


def test_load_router_from_a_bundle(tmp_path: Path) -> None:
    policy = _policy(fine_parents=TINY_FINE_PARENTS)
    manifest = build_tiny_bundle(tmp_path / "routed", heads=True, router=policy)
    assert ROUTER_FILE in manifest.files
    assert load_router(tmp_path / "routed", manifest) == policy
    plain = build_tiny_bundle(tmp_path / "plain", heads=True)
    assert load_router(tmp_path / "plain", plain) is None


@pytest.mark.parametrize(
    ("heads", "parents", "message"),
    [
        (True, (0, 0, 1, 1), "fine_parents has 4 entries but the hierarchy has 6 fine labels"),
        (True, (0, 0, 1, 1, 2, 3), "names coarse label 3 but the hierarchy has 3 coarse labels"),
        (False, TINY_FINE_PARENTS, "the bundle has no heads.onnx"),
    ],
)
def test_a_router_that_does_not_fit_the_bundle_is_refused(
    tmp_path: Path, heads: bool, parents: tuple, message: str
) -> None:
    build_tiny_bundle(tmp_path, heads=heads, router=_policy(fine_parents=parents))
    with pytest.raises(BundleError, match=message):
        load_router(tmp_path, load_bundle(tmp_path))


def test_the_router_needs_numpy_but_neither_torch_nor_sklearn() -> None:
    code = (
        "import sys, bundle.router, service.granularity; "
        "sys.exit(bool({'torch', 'sklearn'} & set(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[2])
    assert result.returncode == 0
