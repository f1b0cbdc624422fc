"""How often ``granularity=auto`` picks the right resolution, offline, with the service's own code.

A mixed workload (:mod:`training.evaluation.mixed_queries`: every query labelled coarse or fine)
goes through the bundle's tokenizer and ``encoder.onnx``
(:func:`training.bundle_embeddings.onnx_embeddings`), then through
:class:`service.granularity.GranularityRouter` — no HTTP, no index. Four policies decide on the
same vectors:

- ``router``: the bundle's ``router.json`` (absent from the result when the bundle has none);
- ``thresholds``: the threshold policy (``FRACTAL_AUTO_*_THRESHOLD``, 0.5 and 0.5 by default);
- ``always_coarse`` and ``always_fine``: the two fixed answers (on a 50/50 mix, 0.5 each).

Per policy: ``accuracy`` (right decisions over all queries), ``coarse_recall`` (coarse queries
sent to coarse) and ``fine_recall`` (fine queries sent to fine).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bundle import COARSE, load_bundle
from service.granularity import GranularityRouter
from training.bundle_embeddings import onnx_embeddings
from training.evaluation.mixed_queries import MixedQuery

POLICIES = ("router", "thresholds", "always_coarse", "always_fine")
DEFAULT_THRESHOLD = 0.5


def _scores(decided_coarse: np.ndarray, is_coarse: np.ndarray) -> dict[str, float]:
    return {
        "accuracy": float(np.mean(decided_coarse == is_coarse)),
        "coarse_recall": float(np.mean(decided_coarse[is_coarse])) if is_coarse.any() else 0.0,
        "fine_recall": float(np.mean(~decided_coarse[~is_coarse])) if (~is_coarse).any() else 0.0,
    }


def decisions(
    bundle_dir: Path,
    vectors: np.ndarray,
    *,
    fine_threshold: float = DEFAULT_THRESHOLD,
    coarse_threshold: float = DEFAULT_THRESHOLD,
) -> dict[str, np.ndarray]:
    """Per policy of the module docstring, whether it sends each query (a row of ``vectors``,
    the full embeddings) to coarse."""
    manifest = load_bundle(bundle_dir)
    routers = {
        "router": GranularityRouter(bundle_dir, manifest, fine_threshold, coarse_threshold),
        "thresholds": GranularityRouter(
            bundle_dir, manifest, fine_threshold, coarse_threshold, use_router_file=False
        ),
    }
    decided = {}
    for name, router in routers.items():
        if name == "router" and router.router is None:
            continue
        decided[name] = np.array([d.granularity == COARSE for d in router.decide(vectors)])
    decided["always_coarse"] = np.ones(len(vectors), bool)
    decided["always_fine"] = np.zeros(len(vectors), bool)
    return decided


def decision_accuracy(
    bundle_dir: Path,
    queries: Sequence[MixedQuery],
    *,
    fine_threshold: float = DEFAULT_THRESHOLD,
    coarse_threshold: float = DEFAULT_THRESHOLD,
    vectors: np.ndarray | None = None,
) -> dict[str, dict[str, float]]:
    """Scores of every policy of the module docstring on ``queries``; ``vectors`` are the
    queries' full embeddings if already computed (else the bundle's encoder makes them)."""
    if vectors is None:
        vectors = onnx_embeddings(bundle_dir, [query.text for query in queries])
    is_coarse = np.array([query.level == COARSE for query in queries])
    decided = decisions(
        bundle_dir, vectors, fine_threshold=fine_threshold, coarse_threshold=coarse_threshold
    )
    return {name: _scores(coarse, is_coarse) for name, coarse in decided.items()}
