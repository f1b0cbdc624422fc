"""``router.json``: the learned ``granularity=auto`` policy a bundle may ship, and its features.

The policy says, from what ``heads.onnx`` makes of a query (coarse logits from the coarse prefix,
fine logits from the full vector), whether the query asks for the coarse resolution (it names a
coarse label, CLINC: a domain, but no single fine label in it) or the fine one. It is a logistic
regression over the per-query features of :func:`router_features`:

    P(coarse) = σ(bias + Σ_j weight_j · (feature_j − mean_j) / scale_j)

and the query goes to the coarse resolution when ``P(coarse) ≥ threshold``. The export fits it
(:mod:`training.router_fit`); the service applies it (:mod:`service.granularity`). Both compute the
features with the one function here, so the policy sees at serving time exactly the numbers it
was fitted on. The file::

    {"format": "fractal-router", "version": 1, "model": "logistic_regression",
     "features": [names, a subset of FEATURE_NAMES, in the order of the weights],
     "mean": [...], "scale": [...], "weights": [...], "bias": b, "threshold": t,
     "fine_parents": [coarse label id of every fine label id],
     "fit": {how and on what it was fitted: construction, rows, sizes, accuracy, ...}}

Unlike :mod:`bundle.format` and :mod:`bundle.writing`, which the standard library alone runs,
this module needs numpy (the features are array maths on logits); it is not imported by
``bundle/__init__``, so ``import bundle`` stays standard-library only. Every reader of a router
(the service, the trainer, the benchmarks) has numpy.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bundle.format import HEADS_FILE, BundleError, Manifest

ROUTER_FILE = "router.json"
ROUTER_FORMAT = "fractal-router"
ROUTER_VERSION = 1
ROUTER_MODEL = "logistic_regression"

FEATURE_NAMES: tuple[str, ...] = (
    "coarse_max",
    "coarse_margin",
    "coarse_entropy",
    "fine_max",
    "fine_margin",
    "fine_entropy",
    "fine_top2_same_parent",
    "fine_top3_same_parent",
    "heads_agree",
    "fine_parent_mass",
    "fine_share_of_parent",
    "fine_entropy_within_parent",
    "coarse_prob_of_fine_parent",
    "coarse_fine_overlap",
)
"""What :func:`router_features` computes, per query (softmax probabilities unless said):

- ``coarse_max``, ``coarse_margin``, ``coarse_entropy``: the coarse head's top probability, its
  lead over the second, and its entropy over ``log(#coarse labels)`` (0 sure … 1 uniform);
- ``fine_max``, ``fine_margin``, ``fine_entropy``: the same for the fine head;
- ``fine_top2_same_parent``, ``fine_top3_same_parent``: 1 when the fine head's two (three) most
  probable fine labels all have the same coarse parent, else 0;
- ``heads_agree``: 1 when the coarse head's label is the parent of the fine head's label;
- ``fine_parent_mass``: the fine head's probabilities summed per coarse parent, the largest sum
  (how sure the fine head is of the domain);
- ``fine_share_of_parent``: the top fine probability over the summed probability of its parent
  (near 1: one intent holds its domain's mass; low: the mass is spread over the domain);
- ``fine_entropy_within_parent``: the entropy of the fine probabilities inside the parent of
  ``fine_parent_mass``, renormalised, over ``log(#children)`` (0 when it has one child);
- ``coarse_prob_of_fine_parent``: the coarse head's probability of the fine label's parent;
- ``coarse_fine_overlap``: Σ_c √(p_coarse(c) · mass_fine(c)), the Bhattacharyya coefficient of
  the coarse head's distribution and the fine head's per-parent sums (1: the heads agree fully).
"""


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax, computed in float64."""
    shifted = np.asarray(logits, np.float64)
    shifted = shifted - shifted.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


def _entropy(probabilities: np.ndarray) -> np.ndarray:
    safe = np.where(probabilities > 0, probabilities, 1.0)
    return -(probabilities * np.log(safe)).sum(axis=1)


def _check_logits(
    coarse_logits: np.ndarray, fine_logits: np.ndarray, fine_parents: np.ndarray
) -> None:
    if coarse_logits.ndim != 2 or fine_logits.ndim != 2 or len(coarse_logits) != len(fine_logits):
        raise ValueError(
            f"logits must be [batch, labels] arrays of one batch, not {coarse_logits.shape} "
            f"and {fine_logits.shape}"
        )
    if coarse_logits.shape[1] < 2 or fine_logits.shape[1] < 2:
        raise ValueError("each head needs at least two labels")
    if fine_parents.shape != (fine_logits.shape[1],):
        raise ValueError(
            f"fine_parents has {fine_parents.shape} entries for {fine_logits.shape[1]} fine labels"
        )
    if fine_parents.min() < 0 or fine_parents.max() >= coarse_logits.shape[1]:
        raise ValueError(f"fine_parents must be coarse label ids < {coarse_logits.shape[1]}")


def router_features(
    coarse_logits: np.ndarray,
    fine_logits: np.ndarray,
    fine_parents: np.ndarray | list[int] | tuple[int, ...],
    names: tuple[str, ...] = FEATURE_NAMES,
) -> np.ndarray:
    """The features ``names`` (see :data:`FEATURE_NAMES`) of every query, float64
    ``[batch, len(names)]``, from the heads' logits (``[batch, #coarse]``, ``[batch, #fine]``)
    and the coarse parent id of every fine label."""
    coarse_logits, fine_logits = np.asarray(coarse_logits), np.asarray(fine_logits)
    parents = np.asarray(fine_parents, dtype=np.int64)
    _check_logits(coarse_logits, fine_logits, parents)
    unknown = [name for name in names if name not in FEATURE_NAMES]
    if unknown:
        raise ValueError(f"unknown router feature(s) {unknown}; known: {list(FEATURE_NAMES)}")
    batch = np.arange(len(fine_logits))
    num_coarse = coarse_logits.shape[1]
    coarse, fine = softmax(coarse_logits), softmax(fine_logits)
    coarse_sorted = np.sort(coarse, axis=1)[:, ::-1]
    fine_order = np.argsort(-fine, axis=1, kind="stable")[:, :3]
    top_parents = parents[fine_order]
    fine_top = fine[batch, fine_order[:, 0]]
    fine_second = fine[batch, fine_order[:, 1]]
    membership = np.zeros((len(parents), num_coarse))
    membership[np.arange(len(parents)), parents] = 1.0
    parent_mass = fine @ membership
    best_parent = parent_mass.argmax(axis=1)
    inside = fine * (parents[None, :] == best_parent[:, None])
    inside = inside / np.maximum(inside.sum(axis=1, keepdims=True), np.finfo(np.float64).tiny)
    children = membership.sum(axis=0)[best_parent]
    within = np.where(children > 1, _entropy(inside) / np.log(np.maximum(children, 2)), 0.0)
    columns = {
        "coarse_max": coarse_sorted[:, 0],
        "coarse_margin": coarse_sorted[:, 0] - coarse_sorted[:, 1],
        "coarse_entropy": _entropy(coarse) / np.log(num_coarse),
        "fine_max": fine_top,
        "fine_margin": fine_top - fine_second,
        "fine_entropy": _entropy(fine) / np.log(fine.shape[1]),
        "fine_top2_same_parent": (top_parents[:, 0] == top_parents[:, 1]).astype(np.float64),
        "fine_top3_same_parent": (
            (top_parents[:, 0] == top_parents[:, 1]) & (top_parents[:, 0] == top_parents[:, -1])
        ).astype(np.float64),
        "heads_agree": (coarse.argmax(axis=1) == top_parents[:, 0]).astype(np.float64),
        "fine_parent_mass": parent_mass[batch, best_parent],
        "fine_share_of_parent": fine_top / parent_mass[batch, top_parents[:, 0]],
        "fine_entropy_within_parent": within,
        "coarse_prob_of_fine_parent": coarse[batch, top_parents[:, 0]],
        "coarse_fine_overlap": np.sqrt(coarse * parent_mass).sum(axis=1),
    }
    return np.stack([columns[name] for name in names], axis=1).reshape(len(batch), len(names))


@dataclass(frozen=True)
class RouterPolicy:
    """A fitted ``router.json`` (see the module docstring); constructing one checks it."""

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    threshold: float
    fine_parents: tuple[int, ...]
    fit: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_policy(self)

    def coarse_probability(self, coarse_logits: np.ndarray, fine_logits: np.ndarray) -> np.ndarray:
        """``P(coarse)`` of every query (float64 ``[batch]``) from the heads' logits."""
        features = router_features(coarse_logits, fine_logits, self.fine_parents, self.features)
        standardised = (features - np.asarray(self.mean)) / np.asarray(self.scale)
        score = standardised @ np.asarray(self.weights) + self.bias
        return 1.0 / (1.0 + np.exp(-np.clip(score, -500, 500)))

    def to_json(self) -> dict[str, Any]:
        return {
            "format": ROUTER_FORMAT,
            "version": ROUTER_VERSION,
            "model": ROUTER_MODEL,
            "features": list(self.features),
            "mean": list(self.mean),
            "scale": list(self.scale),
            "weights": list(self.weights),
            "bias": self.bias,
            "threshold": self.threshold,
            "fine_parents": list(self.fine_parents),
            "fit": self.fit,
        }

    @classmethod
    def from_json(cls, data: object) -> RouterPolicy:
        """Parse a decoded ``router.json``; every problem is a :class:`BundleError`."""
        if not isinstance(data, dict):
            raise _fail("must hold a JSON object")
        if data.get("format") != ROUTER_FORMAT or data.get("version") != ROUTER_VERSION:
            raise _fail(
                f"is format {data.get('format')!r} version {data.get('version')!r}; this reader "
                f"reads {ROUTER_FORMAT!r} version {ROUTER_VERSION}"
            )
        if data.get("model") != ROUTER_MODEL:
            raise _fail(f"model {data.get('model')!r} is not {ROUTER_MODEL!r}")
        expected = {"format", "version", "model", "features", "mean", "scale", "weights", "bias",
                    "threshold", "fine_parents", "fit"}  # fmt: skip
        if set(data) != expected:
            missing, unknown = sorted(expected - set(data)), sorted(set(data) - expected)
            raise _fail(f"has missing field(s) {missing} and unknown field(s) {unknown}")
        values = {name: data[name] for name in expected - {"format", "version", "model"}}
        for name in ("features", "mean", "scale", "weights", "fine_parents"):
            if not isinstance(values[name], list):
                raise _fail(f"{name} must be a list")
            values[name] = tuple(values[name])
        return cls(**values)


def _fail(problem: str) -> BundleError:
    return BundleError(f"{ROUTER_FILE}: {problem}")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_policy(policy: RouterPolicy) -> None:
    features = policy.features
    if not features or not all(isinstance(name, str) for name in features):
        raise _fail("features must be a non-empty list of feature names")
    unknown = [name for name in features if name not in FEATURE_NAMES]
    if unknown or len(set(features)) != len(features):
        raise _fail(
            f"features {list(features)} must be distinct names this reader computes "
            f"({', '.join(FEATURE_NAMES)}); unknown: {unknown}"
        )
    for name in ("mean", "scale", "weights"):
        values = getattr(policy, name)
        if len(values) != len(features) or not all(_is_number(v) for v in values):
            raise _fail(f"{name} must hold {len(features)} finite numbers, one per feature")
    if not all(value > 0 for value in policy.scale):
        raise _fail("scale must be positive")
    if not _is_number(policy.bias):
        raise _fail(f"bias must be a finite number, not {policy.bias!r}")
    if not _is_number(policy.threshold) or not 0 < policy.threshold < 1:
        raise _fail(f"threshold must be a probability strictly between 0 and 1, not "
                    f"{policy.threshold!r}")  # fmt: skip
    parents = policy.fine_parents
    if len(parents) < 2 or not all(
        isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parents
    ):
        raise _fail("fine_parents must list a coarse label id (an int >= 0) for every fine label")
    if not isinstance(policy.fit, dict):
        raise _fail("fit must be an object")
    try:
        json.dumps(policy.fit)
    except (TypeError, ValueError) as exc:
        raise _fail(f"fit must be JSON-serialisable: {exc}") from exc


def write_router(path: Path, policy: RouterPolicy) -> None:
    """Write ``policy`` as ``router.json`` at ``path``."""
    text = json.dumps(policy.to_json(), indent=2, ensure_ascii=False) + "\n"
    Path(path).write_text(text, encoding="utf-8")


def read_router(path: Path) -> RouterPolicy:
    """Read and check a ``router.json`` on its own; :class:`BundleError` if malformed."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _fail(f"cannot be read as JSON: {exc}") from exc
    return RouterPolicy.from_json(data)


def load_router(bundle_dir: Path, manifest: Manifest) -> RouterPolicy | None:
    """The bundle's router policy, or None when its manifest lists no ``router.json``.

    Checks it against the bundle: it needs ``heads.onnx`` and the hierarchy the heads were trained
    on, one parent per fine label, parents among the coarse labels. Raises :class:`BundleError`.
    Call after :func:`bundle.load_bundle`, which has verified the file's sha256.
    """
    if ROUTER_FILE not in manifest.files:
        return None
    if HEADS_FILE not in manifest.files or not manifest.hierarchy:
        raise _fail(f"is listed but the bundle has no {HEADS_FILE} and hierarchy to route with")
    policy = read_router(Path(bundle_dir) / ROUTER_FILE)
    num_coarse, num_fine = len(manifest.hierarchy[0].labels), len(manifest.hierarchy[-1].labels)
    if len(policy.fine_parents) != num_fine:
        raise _fail(
            f"fine_parents has {len(policy.fine_parents)} entries but the hierarchy has "
            f"{num_fine} fine labels"
        )
    if max(policy.fine_parents) >= num_coarse:
        raise _fail(
            f"fine_parents names coarse label {max(policy.fine_parents)} but the hierarchy has "
            f"{num_coarse} coarse labels"
        )
    return policy
