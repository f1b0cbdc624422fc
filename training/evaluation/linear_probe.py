"""Logistic-regression F1 and accuracy on frozen features, per prefix: the MIC/MIPIC papers'
classification protocol (MIC appendix B.4, MIPIC appendix A.4, after SentEval, Conneau & Kiela
2018).

For each prefix the training vectors are cut to ``dim`` columns, L2-normalised (as the service
serves them) and standardised with the training split's mean and deviation; a multinomial,
L2-regularised logistic regression (scikit-learn, lbfgs, ``C = 1``, at most 1,000 iterations) is
fitted on them and the test split is scored by macro-averaged F1 (the papers' number) and by
accuracy (MTEB's main classification score).
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score
from sklearn.preprocessing import StandardScaler

from training.evaluation.knn import normalize_prefix

MAX_ITERATIONS = 1000


def logistic_regression_scores(
    train_vectors: np.ndarray,
    train_labels: np.ndarray,
    test_vectors: np.ndarray,
    test_labels: np.ndarray,
    prefix_dims: list[int],
) -> dict[str, np.ndarray]:
    """``{"macro_f1", "accuracy"}``: one score in [0, 1] per prefix of a logistic regression on
    that prefix; labels are 1-d integers."""
    scores = {"macro_f1": np.zeros(len(prefix_dims)), "accuracy": np.zeros(len(prefix_dims))}
    for column, dim in enumerate(prefix_dims):
        scaler = StandardScaler().fit(normalize_prefix(train_vectors, dim))
        classifier = LogisticRegression(C=1.0, max_iter=MAX_ITERATIONS)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            classifier.fit(scaler.transform(normalize_prefix(train_vectors, dim)), train_labels)
        predicted = classifier.predict(scaler.transform(normalize_prefix(test_vectors, dim)))
        scores["macro_f1"][column] = f1_score(test_labels, predicted, average="macro")
        scores["accuracy"][column] = accuracy_score(test_labels, predicted)
    return scores
