"""``granularity=auto``: choose the coarse or the fine index per query with the bundle's heads.

``heads.onnx`` reads the coarse level (CLINC: the domain) from the normalised coarse prefix and
the finest level (the intent) from the full vector. The policy, per query:

1. **fine** when the fine head is confident (max softmax ≥ ``fine_threshold``): the query names
   a specific intent, and the full vector ranks documents of that intent first;
2. else **coarse** when the coarse head is confident (≥ ``coarse_threshold``): the query is
   clearly about a domain but not about one intent in it, so it is served from the coarse prefix,
   which a V5 head trains to hold the domain and little else, from an index a quarter the size;
3. else **fine**: the query fits no known class well, and the full vector keeps everything the
   encoder saw.

Why max softmax: on the small CLINC-150 V5 bundle of the tests (1,500 training texts), queries
whose fine confidence is ≥ 0.5 (73% of the test set) get the right intent 94% of the time, the
others 59%; intent-level retrieval pays only where the intent is recognisable.

A bundle whose export fitted a policy to its heads ships it as ``router.json``
(:mod:`bundle.router`); auto then applies that policy instead of the thresholds: a logistic
regression over features of both heads' outputs (confidences, entropies, margins, whether the
fine head's top intents share a domain, whether the heads agree on the domain), fitted on the
training split's held-out rows to tell queries about a domain from queries about one intent.
A query goes to coarse when its ``P(coarse)`` reaches the policy's threshold. Bundles without
``router.json`` keep the threshold policy above, with the same settings.

Each decision names the labels the heads chose by their paths from the root, joined by
:data:`bundle.LABEL_PATH_SEPARATOR` (``banking / balance``); a bundle whose manifest predates
recorded parents shows the bare label names.

A bundle without ``heads.onnx`` (the identity bundle) always routes to fine, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bundle import COARSE, COARSE_LOGITS, EMBEDDING, FINE, FINE_LOGITS, HEADS_FILE, Manifest
from bundle.router import ROUTER_FILE, RouterPolicy, load_router, softmax
from encoding.encoder import onnx_session

NO_HEADS = f"the bundle has no {HEADS_FILE}: auto always routes to fine"


@dataclass(frozen=True)
class AutoDecision:
    """The granularity chosen for one query, why, and what the heads said."""

    granularity: str
    reason: str
    coarse_label: str | None = None
    coarse_confidence: float | None = None
    fine_label: str | None = None
    fine_confidence: float | None = None


ROUTER_POLICY = "router"
THRESHOLD_POLICY = "thresholds"
NO_HEADS_POLICY = "fine"


class GranularityRouter:
    """Applies the bundle's ``router.json`` policy if it has one, else the threshold policy of the
    module docstring; without heads, routes everything to fine. ``use_router_file=False`` applies
    the thresholds even where the bundle has a router (to compare the two)."""

    def __init__(
        self,
        bundle_dir: Path,
        manifest: Manifest,
        fine_threshold: float,
        coarse_threshold: float,
        *,
        use_router_file: bool = True,
    ) -> None:
        self.fine_threshold = fine_threshold
        self.coarse_threshold = coarse_threshold
        self.has_heads = HEADS_FILE in manifest.files and manifest.hierarchy is not None
        self._session = onnx_session(bundle_dir / HEADS_FILE, 1) if self.has_heads else None
        self.router: RouterPolicy | None = (
            load_router(bundle_dir, manifest) if self.has_heads and use_router_file else None
        )
        # Labels are shown as their paths from the root ("banking / balance").
        self._coarse_labels = manifest.label_display_names(0) if self.has_heads else ()
        self._fine_labels = manifest.label_display_names(-1) if self.has_heads else ()

    @property
    def policy(self) -> str:
        """Which policy decides: ``router`` (router.json), ``thresholds`` or ``fine`` (no heads)."""
        if not self.has_heads:
            return NO_HEADS_POLICY
        return ROUTER_POLICY if self.router is not None else THRESHOLD_POLICY

    def decide(self, vectors: np.ndarray) -> list[AutoDecision]:
        """One decision per full (unnormalised) query vector."""
        if self._session is None:
            return [AutoDecision(FINE, NO_HEADS) for _ in range(len(vectors))]
        coarse_logits, fine_logits = self._session.run(
            [COARSE_LOGITS, FINE_LOGITS], {EMBEDDING: np.ascontiguousarray(vectors, np.float32)}
        )
        coarse, fine = softmax(coarse_logits), softmax(fine_logits)
        if self.router is None:
            return [self._thresholds(c, f) for c, f in zip(coarse, fine, strict=True)]
        probabilities = self.router.coarse_probability(coarse_logits, fine_logits)
        return [
            self._learned(c, f, float(p))
            for c, f, p in zip(coarse, fine, probabilities, strict=True)
        ]

    def _learned(self, coarse: np.ndarray, fine: np.ndarray, probability: float) -> AutoDecision:
        assert self.router is not None
        threshold = self.router.threshold
        to_coarse = probability >= threshold
        relation = ">=" if to_coarse else "<"
        reason = f"{ROUTER_FILE}: P(coarse) = {probability:.3f} {relation} {threshold}"
        return self._decision(COARSE if to_coarse else FINE, reason, coarse, fine)

    def _thresholds(self, coarse: np.ndarray, fine: np.ndarray) -> AutoDecision:
        coarse_confidence, fine_confidence = float(coarse.max()), float(fine.max())
        if fine_confidence >= self.fine_threshold:
            granularity = FINE
            reason = f"fine head confident ({fine_confidence:.2f} >= {self.fine_threshold})"
        elif coarse_confidence >= self.coarse_threshold:
            granularity = COARSE
            reason = (
                f"fine head unsure ({fine_confidence:.2f} < {self.fine_threshold}), coarse head "
                f"confident ({coarse_confidence:.2f} >= {self.coarse_threshold})"
            )
        else:
            granularity = FINE
            reason = (
                f"both heads unsure (fine {fine_confidence:.2f}, coarse {coarse_confidence:.2f}): "
                "the full vector keeps the most information"
            )
        return self._decision(granularity, reason, coarse, fine)

    def _decision(
        self, granularity: str, reason: str, coarse: np.ndarray, fine: np.ndarray
    ) -> AutoDecision:
        coarse_best, fine_best = int(coarse.argmax()), int(fine.argmax())
        return AutoDecision(
            granularity,
            reason,
            self._coarse_labels[coarse_best],
            float(coarse[coarse_best]),
            self._fine_labels[fine_best],
            float(fine[fine_best]),
        )
