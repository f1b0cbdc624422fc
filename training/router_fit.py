"""Fitting a bundle's ``granularity=auto`` policy (``router.json``, :mod:`bundle.router`) at export.

Which rows: the trainer holds out a validation slice of the training split
(:func:`training.trainer.validation_split`, ``TrainConfig.validation_fraction``, drawn from the
run's seed); the head's weights were never fitted on those rows (the slice only chose the best
epoch), so the heads are as unsure of them as of unseen queries. The test split is never touched.

What: the **join** construction (:func:`training.evaluation.mixed_queries.join_queries`) on those
rows, balanced: every validation utterance once as a fine query, as many coarse queries joining two
validation utterances of different fine labels under one coarse label. Fine queries reuse the rows'
frozen features; the joined texts are encoded by the frozen encoder. The head turns both into
coarse and fine logits exactly as ``heads.onnx`` does (coarse from the normalised coarse prefix,
fine from the normalised full vector), :func:`bundle.router.router_features` into features, and a
logistic regression (scikit-learn, on standardised features) into ``P(coarse)``; the decision
threshold is 0.5. The held-out **named need** construction plays no part here.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from bundle.router import FEATURE_NAMES, RouterPolicy, router_features
from training.data.dataset import HierarchicalDataset, LabelHierarchy
from training.errors import FractalError
from training.evaluation.mixed_queries import join_queries
from training.head import FractalHead
from training.prepared_data import PreparedData
from training.train_config import TrainConfig
from training.trainer import validation_split

DECISION_THRESHOLD = 0.5
REGULARISATION = 1.0  # LogisticRegression's C, on standardised features
MIN_VALIDATION_ROWS = 20
CV_FOLDS = 5
JOIN_SEED = 0


def fine_parents(hierarchy: LabelHierarchy) -> np.ndarray:
    """The coarse (level 0) label id of every fine (finest level) label id: the hierarchy's
    parent ids followed up from the finest level."""
    ancestor = np.arange(hierarchy.num_classes(hierarchy.depth - 1))
    for level in range(hierarchy.depth - 1, 0, -1):
        ancestor = np.asarray(hierarchy.parents[level], dtype=np.int64)[ancestor]
    return ancestor


def fit_policy(
    coarse_logits: np.ndarray,
    fine_logits: np.ndarray,
    is_coarse: np.ndarray,
    parents: np.ndarray,
    *,
    fit_info: dict | None = None,
) -> RouterPolicy:
    """A logistic regression of ``is_coarse`` on the standardised :data:`FEATURE_NAMES` of the
    queries whose heads gave these logits. Its training accuracy and log loss go in ``fit``, and
    the accuracy of the same fit cross-validated over these queries (5 stratified folds, where
    each kind has that many queries): what to expect on queries like them that it did not see."""
    is_coarse = np.asarray(is_coarse, dtype=bool)
    if is_coarse.all() or not is_coarse.any():
        raise FractalError("fitting a router needs both coarse and fine queries")
    features = router_features(coarse_logits, fine_logits, parents)
    mean = features.mean(axis=0)
    scale = features.std(axis=0)
    scale = np.where(scale > 1e-9, scale, 1.0)
    model = LogisticRegression(C=REGULARISATION, max_iter=5000)
    model.fit((features - mean) / scale, is_coarse)
    policy = RouterPolicy(
        features=FEATURE_NAMES,
        mean=tuple(float(v) for v in mean),
        scale=tuple(float(v) for v in scale),
        weights=tuple(float(v) for v in model.coef_[0]),
        bias=float(model.intercept_[0]),
        threshold=DECISION_THRESHOLD,
        fine_parents=tuple(int(p) for p in parents),
    )
    probability = np.clip(policy.coarse_probability(coarse_logits, fine_logits), 1e-12, 1 - 1e-12)
    decided_coarse = probability >= policy.threshold
    log_loss = -np.mean(np.where(is_coarse, np.log(probability), np.log(1 - probability)))
    folds = min(CV_FOLDS, int(is_coarse.sum()), int((~is_coarse).sum()))
    cross_validated = None
    if folds >= 2:
        pipeline = make_pipeline(
            StandardScaler(), LogisticRegression(C=REGULARISATION, max_iter=5000)
        )
        splits = StratifiedKFold(folds, shuffle=True, random_state=0)
        cross_validated = float(cross_val_score(pipeline, features, is_coarse, cv=splits).mean())
    fit = {
        **(fit_info or {}),
        "queries": int(len(is_coarse)),
        "coarse_queries": int(is_coarse.sum()),
        "fine_queries": int((~is_coarse).sum()),
        "accuracy": float(np.mean(decided_coarse == is_coarse)),
        "log_loss": float(log_loss),
        "cross_validated_accuracy": cross_validated,
        "cross_validation_folds": folds if cross_validated is not None else 0,
        "regularisation_c": REGULARISATION,
    }
    return replace(policy, fit=fit)


@torch.no_grad()
def head_logits(
    head: FractalHead, features: np.ndarray, coarse_dim: int
) -> tuple[np.ndarray, np.ndarray]:
    """The coarse and fine logits ``heads.onnx`` gives for frozen ``features`` (the export's
    ``_Heads``: level 0 from the coarse prefix, the finest level from the full vector)."""
    device = next(head.parameters()).device
    embedding = head.eval()(torch.from_numpy(np.ascontiguousarray(features, np.float32)).to(device))
    coarse = head.logits(embedding, 0, coarse_dim)
    fine = head.logits(embedding, len(head.classifiers) - 1, head.dim)
    return coarse.cpu().numpy(), fine.cpu().numpy()


def validation_rows(data: PreparedData, config: TrainConfig) -> np.ndarray:
    """The training-split rows ``train_head`` held out when it trained with ``config``."""
    generator = np.random.default_rng(config.seed)
    held_out, _ = validation_split(len(data.splits.train), config.validation_fraction, generator)
    return held_out


def fit_router(
    data: PreparedData,
    head: FractalHead,
    config: TrainConfig,
    *,
    progress: bool = False,
) -> tuple[RouterPolicy | None, str]:
    """The policy for a run's head (trained with ``config`` on ``data``), fitted as the module
    docstring says, and a line saying what was fitted; ``(None, why)`` when the run held out too
    few validation rows, or no two of them can be joined into a coarse query."""
    rows = validation_rows(data, config)
    if len(rows) < MIN_VALIDATION_ROWS:
        return None, (
            f"no {len(rows)} < {MIN_VALIDATION_ROWS} validation rows held out from the head "
            "(validation_fraction) to fit a router on: auto keeps the threshold policy"
        )
    validation: HierarchicalDataset = data.splits.train.subset(rows)
    try:
        queries = join_queries(validation, 2 * len(rows), seed=JOIN_SEED)
    except FractalError as exc:
        return None, f"no router fitted ({exc}): auto keeps the threshold policy"
    features = np.empty((len(queries), data.train_features.shape[1]), dtype=np.float32)
    joined = [i for i, query in enumerate(queries) if len(query.rows) > 1]
    single = [i for i, query in enumerate(queries) if len(query.rows) == 1]
    features[single] = data.train_features[[rows[queries[i].rows[0]] for i in single]]
    features[joined] = data.encoder.encode([queries[i].text for i in joined], progress=progress)
    coarse_logits, fine_logits = head_logits(head, features, config.prefix_dims[0])
    is_coarse = np.array([len(query.rows) > 1 for query in queries])
    policy = fit_policy(
        coarse_logits,
        fine_logits,
        is_coarse,
        fine_parents(data.hierarchy),
        fit_info={
            "construction": "join",
            "rows": "training split, the head's held-out validation slice "
            f"(validation_fraction {config.validation_fraction}, seed {config.seed})",
            "validation_rows": int(len(rows)),
            "join_seed": JOIN_SEED,
        },
    )
    return policy, (
        f"router: fitted on {policy.fit['queries']} join queries from {len(rows)} validation "
        f"rows, training accuracy {policy.fit['accuracy']:.3f}"
    )
