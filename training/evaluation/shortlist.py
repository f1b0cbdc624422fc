"""The C2F shortlist prefix: which trained prefix a coarse-to-fine search should shortlist at.

C2F takes a shortlist of ``k′`` documents by cosine at a small prefix and re-ranks it exactly by
cosine at the full vector. Its recall@k against exact full-dimension search is

    recall@k = |top-k of (shortlist of k′ at the p-prefix, re-ranked at full) ∩ exact top-k| / k,

averaged over the queries. A prefix trained to hold only coarse meaning (V5's 64-d one) makes a
poor shortlist, one that keeps the fine meaning a good one, so the choice is measured, per bundle,
at export: the training split is the corpus, the test split the queries, exact numpy throughout.
The chosen **shortlist prefix** is the smallest prefix below the full one whose recall at
``k′ = CHOICE_FACTOR × k`` reaches :data:`RECALL_TARGET`; when none does it is the full dimension,
and C2F is then plain search at the full dimension (its shortlist is already at full).

Beside that exact measurement, the export measures the first stage as the service runs it
(:func:`index.first_stage.measure_first_stage`): an HNSW graph at each prefix in 8-bit or 4-bit
codes, at degree 16 or 32, shortlisting for the native re-rank, timed per query on one thread.
The fastest candidate reaching each recall floor within the memory budget is recorded with the
whole table (``evaluation.shortlist.first_stage`` in the manifest); the service applies it with
``FRACTAL_FIRST_STAGE=bundle``. Given the texts' coarse labels, it also measures the coarse
route's beam (:func:`index.coarse_beam.measure_coarse_beam`: the narrowest HNSW efSearch at the
coarse prefix keeping exact search's same-domain precision, ``evaluation.shortlist.coarse_beam``),
which the service applies the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from index.coarse_beam import CoarseBeamMeasurement, measure_coarse_beam
from index.first_stage import FirstStageMeasurement, measure_first_stage
from training.evaluation.knn import normalize_prefix

K = 10
"""Hits per query the recall is measured at."""
SHORTLIST_FACTORS = (2, 4, 10)
"""Shortlist sizes measured, as multiples of ``K``: k′ = 20, 40, 100."""
CHOICE_FACTOR = 4
"""The shortlist size the choice is made at, k′ = 4k: the service's default ``C2F_FACTOR``."""
RECALL_TARGET = 0.99
"""The C2F recall@k the chosen prefix must reach at k′ = ``CHOICE_FACTOR × K``."""
QUERY_CHUNK = 256
"""Queries scored at once: two ``[chunk, corpus]`` float32 score matrices in memory."""
FIRST_STAGE_QUERIES = 1_000
"""Test queries the first-stage measurement uses (every candidate answers each at 15 settings)."""


@dataclass(frozen=True)
class ShortlistRow:
    """One prefix: C2F recall@k at each measured shortlist size."""

    dim: int
    recall: tuple[float, ...]


@dataclass(frozen=True)
class ShortlistMeasurement:
    """C2F recall@k per prefix below ``full_dim`` and shortlist size, and the chosen prefix."""

    k: int
    shortlist_ks: tuple[int, ...]
    choice_k: int
    target: float
    full_dim: int
    documents: int
    queries: int
    rows: tuple[ShortlistRow, ...]
    shortlist_dim: int
    first_stage: FirstStageMeasurement | None = None
    coarse_beam: CoarseBeamMeasurement | None = None

    @property
    def reached(self) -> bool:
        """Whether some prefix below the full one reached the target (else C2F is plain full
        search)."""
        return self.shortlist_dim < self.full_dim

    def to_json(self) -> dict:
        return {
            "k": self.k,
            "shortlist_ks": list(self.shortlist_ks),
            "choice_k": self.choice_k,
            "target_recall": self.target,
            "full_dim": self.full_dim,
            "documents": self.documents,
            "queries": self.queries,
            "recall_at_k": [
                {"dim": row.dim, "recall": [round(value, 4) for value in row.recall]}
                for row in self.rows
            ],
            "shortlist_dim": self.shortlist_dim,
            **({} if self.first_stage is None else {"first_stage": self.first_stage.to_json()}),
            **({} if self.coarse_beam is None else {"coarse_beam": self.coarse_beam.to_json()}),
        }

    def markdown(self) -> list[str]:
        """A "C2F shortlist" section: the table and the choice, one line each."""
        header = ["shortlist prefix", *(f"k′ = {k}" for k in self.shortlist_ks)]
        lines = [
            "## C2F shortlist",
            "",
            f"C2F recall@{self.k} against exact {self.full_dim}-d search: a shortlist of k′ by "
            f"cosine at the prefix, re-ranked exactly at {self.full_dim}-d ({self.documents:,} "
            f"training texts as the corpus, {self.queries:,} test texts as the queries).",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
        ]
        lines += [
            f"| {row.dim} | " + " | ".join(f"{value:.3f}" for value in row.recall) + " |"
            for row in self.rows
        ]
        lines.append("")
        if self.reached:
            lines.append(
                f"Shortlist prefix: **{self.shortlist_dim}** (the smallest reaching "
                f"recall@{self.k} ≥ {self.target} at k′ = {self.choice_k})."
            )
        else:
            lines.append(
                f"Shortlist prefix: **{self.full_dim}**, the full dimension: no smaller prefix "
                f"reaches recall@{self.k} ≥ {self.target} at k′ = {self.choice_k}, so C2F is "
                "plain search at the full dimension."
            )
        if self.first_stage is not None:
            lines += ["", *self.first_stage.markdown()]
        if self.coarse_beam is not None:
            lines += ["", *self.coarse_beam.markdown()]
        return lines


def _top(scores: np.ndarray, count: int) -> np.ndarray:
    """Column indices of each row's ``count`` highest scores, best first."""
    top = np.argpartition(-scores, count - 1, axis=1)[:, :count]
    order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1, kind="stable")
    return np.take_along_axis(top, order, axis=1)


def _overlap(found: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """Per row, how many of ``found``'s ids are among ``exact``'s (ids unique within a row)."""
    return (found[:, :, None] == exact[:, None, :]).any(axis=2).sum(axis=1)


def measure_shortlist(
    corpus: np.ndarray,
    queries: np.ndarray,
    prefix_dims: Sequence[int],
    *,
    k: int = K,
    factors: Sequence[int] = SHORTLIST_FACTORS,
    choice_factor: int = CHOICE_FACTOR,
    target: float = RECALL_TARGET,
    chunk: int = QUERY_CHUNK,
    first_stage: bool = True,
    domains: tuple[np.ndarray, np.ndarray] | None = None,
) -> ShortlistMeasurement:
    """C2F recall@``k`` of every prefix of ``prefix_dims`` below the full one, for shortlists
    of ``k × factor``, and the chosen shortlist prefix.

    ``corpus`` and ``queries`` are full, unnormalised embeddings (``[n, dim]``, ``dim`` the last
    of ``prefix_dims``); every prefix and the full vector are L2-normalised on their own.
    With ``first_stage``, the served first stage is measured too (on the first
    :data:`FIRST_STAGE_QUERIES` queries); with ``domains`` (the corpus's and the queries' coarse
    labels), the coarse route's beam at the first prefix (on the same queries).
    """
    full_dim = int(prefix_dims[-1])
    if corpus.ndim != 2 or queries.ndim != 2 or corpus.shape[1] != queries.shape[1]:
        raise ValueError(
            f"corpus and queries must be [n, dim] with the same dim, got {corpus.shape} and "
            f"{queries.shape}"
        )
    if corpus.shape[1] != full_dim or list(prefix_dims) != sorted(set(prefix_dims)):
        raise ValueError(
            f"prefix_dims must ascend to the vectors' dim {corpus.shape[1]}, got {prefix_dims}"
        )
    if choice_factor not in factors:
        raise ValueError(f"choice_factor {choice_factor} must be one of the factors {factors}")
    if len(corpus) < k or not len(queries):
        raise ValueError(f"need at least k={k} corpus rows and one query")
    shortlist_ks = tuple(min(k * factor, len(corpus)) for factor in factors)
    dims = [int(dim) for dim in prefix_dims if dim < full_dim]
    full_corpus = normalize_prefix(corpus, full_dim)
    prefix_corpora = {dim: normalize_prefix(corpus, dim) for dim in dims}
    hits = np.zeros((len(dims), len(shortlist_ks)), dtype=np.int64)
    for start in range(0, len(queries), chunk):
        block = queries[start : start + chunk]
        full_scores = normalize_prefix(block, full_dim) @ full_corpus.T
        exact = _top(full_scores, k)
        for row, dim in enumerate(dims):
            ranked = _top(normalize_prefix(block, dim) @ prefix_corpora[dim].T, max(shortlist_ks))
            for column, size in enumerate(shortlist_ks):
                shortlist = ranked[:, :size]
                reranked = np.take_along_axis(
                    shortlist, _top(np.take_along_axis(full_scores, shortlist, axis=1), k), axis=1
                )
                hits[row, column] += int(_overlap(reranked, exact).sum())
    recall = hits / (k * len(queries))
    choice = list(factors).index(choice_factor)
    reaching = [dim for dim, values in zip(dims, recall, strict=True) if values[choice] >= target]
    return ShortlistMeasurement(
        k=k,
        shortlist_ks=shortlist_ks,
        choice_k=shortlist_ks[choice],
        target=target,
        full_dim=full_dim,
        documents=len(corpus),
        queries=len(queries),
        rows=tuple(
            ShortlistRow(dim, tuple(float(v) for v in values))
            for dim, values in zip(dims, recall, strict=True)
        ),
        shortlist_dim=reaching[0] if reaching else full_dim,
        first_stage=measure_first_stage(corpus, queries[:FIRST_STAGE_QUERIES], prefix_dims)
        if first_stage
        else None,
        coarse_beam=None
        if domains is None
        else measure_coarse_beam(
            corpus,
            domains[0],
            queries[:FIRST_STAGE_QUERIES],
            domains[1][:FIRST_STAGE_QUERIES],
            int(prefix_dims[0]),
        ),
    )
