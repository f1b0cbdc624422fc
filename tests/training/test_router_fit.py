"""Fitting the router's policy: on a small synthetic problem it separates queries spread over a
domain from queries sure of one intent, and it reads the same validation rows the trainer held
out."""

from __future__ import annotations

import numpy as np
import pytest

from training.data.dataset import LabelHierarchy
from training.errors import FractalError
from training.router_fit import fine_parents, fit_policy
from training.trainer import validation_split

NUM_COARSE, CHILDREN = 3, 4
PARENTS = np.repeat(np.arange(NUM_COARSE), CHILDREN)  # fine label f is under coarse f // 4


def _queries(count: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Half fine queries (one intent's logit stands out), half coarse (the logits of two or
    three intents of one domain stand out together); the coarse head knows the domain of both."""
    rng = np.random.default_rng(seed)
    is_coarse = np.arange(count) % 2 == 1
    coarse = rng.normal(0, 0.5, (count, NUM_COARSE))
    fine = rng.normal(0, 0.5, (count, len(PARENTS)))
    for row in range(count):
        domain = rng.integers(NUM_COARSE)
        coarse[row, domain] += 4
        children = np.flatnonzero(PARENTS == domain)
        picked = rng.choice(children, rng.integers(2, 4) if is_coarse[row] else 1, replace=False)
        fine[row, picked] += 5
    return coarse, fine, is_coarse


def test_the_fit_separates_spread_from_sure_queries() -> None:
    coarse, fine, is_coarse = _queries(400, seed=0)
    policy = fit_policy(coarse, fine, is_coarse, PARENTS, fit_info={"construction": "synthetic"})
    assert policy.fit["construction"] == "synthetic"
    assert (policy.fit["queries"], policy.fit["coarse_queries"], policy.fit["fine_queries"]) == (
        400,
        200,
        200,
    )
    assert policy.fit["accuracy"] >= 0.95 and policy.fit["log_loss"] < 0.3
    assert policy.fit["cross_validated_accuracy"] >= 0.9
    assert policy.fit["cross_validation_folds"] == 5
    assert policy.threshold == 0.5 and policy.fine_parents == tuple(PARENTS.tolist())
    new_coarse, new_fine, new_is_coarse = _queries(400, seed=1)
    decided = policy.coarse_probability(new_coarse, new_fine) >= policy.threshold
    assert np.mean(decided == new_is_coarse) >= 0.95


def test_the_fit_needs_both_kinds_of_query() -> None:
    coarse, fine, _ = _queries(20, seed=0)
    with pytest.raises(FractalError, match="both coarse and fine queries"):
        fit_policy(coarse, fine, np.zeros(20, bool), PARENTS)


def test_fine_parents_follow_the_hierarchy_up() -> None:
    two = LabelHierarchy(("domain", "intent"), (("a", "b"), ("x", "y", "z")), ((), (0, 0, 1)))
    assert fine_parents(two).tolist() == [0, 0, 1]
    three = LabelHierarchy(
        ("group", "domain", "intent"), (("g", "h"), ("a", "b", "c"), ("x", "y", "z")),
        ((), (0, 1, 1), (2, 0, 1)),
    )  # fmt: skip
    assert fine_parents(three).tolist() == [1, 0, 1]


def test_validation_split_is_the_trainers_first_draw() -> None:
    held_out, kept = validation_split(50, 0.2, np.random.default_rng(7))
    order = np.random.default_rng(7).permutation(50)
    assert held_out.tolist() == order[:10].tolist() and kept.tolist() == order[10:].tolist()
