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
from service.encoder import onnx_session

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


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


class GranularityRouter:
    """Applies the policy of the module docstring; without heads, routes everything to fine."""

    def __init__(
        self,
        bundle_dir: Path,
        manifest: Manifest,
        fine_threshold: float,
        coarse_threshold: float,
    ) -> None:
        self.fine_threshold = fine_threshold
        self.coarse_threshold = coarse_threshold
        self.has_heads = HEADS_FILE in manifest.files and manifest.hierarchy is not None
        self._session = onnx_session(bundle_dir / HEADS_FILE, 1) if self.has_heads else None
        # Labels are shown as their paths from the root ("banking / balance").
        self._coarse_labels = manifest.label_display_names(0) if self.has_heads else ()
        self._fine_labels = manifest.label_display_names(-1) if self.has_heads else ()

    def decide(self, vectors: np.ndarray) -> list[AutoDecision]:
        """One decision per full (unnormalised) query vector."""
        if self._session is None:
            return [AutoDecision(FINE, NO_HEADS) for _ in range(len(vectors))]
        coarse_logits, fine_logits = self._session.run(
            [COARSE_LOGITS, FINE_LOGITS], {EMBEDDING: np.ascontiguousarray(vectors, np.float32)}
        )
        coarse, fine = softmax(coarse_logits), softmax(fine_logits)
        return [self._decide_one(c, f) for c, f in zip(coarse, fine, strict=True)]

    def _decide_one(self, coarse: np.ndarray, fine: np.ndarray) -> AutoDecision:
        coarse_best, fine_best = int(coarse.argmax()), int(fine.argmax())
        coarse_confidence, fine_confidence = float(coarse[coarse_best]), float(fine[fine_best])
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
        return AutoDecision(
            granularity,
            reason,
            self._coarse_labels[coarse_best],
            coarse_confidence,
            self._fine_labels[fine_best],
            fine_confidence,
        )
