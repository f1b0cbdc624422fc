"""The coarse route's beam chosen by measurement: how wide an HNSW walk at the coarse prefix
must be for its task, on a bundle's own data.

A coarse query asks for documents of its domain, not for the exact nearest neighbours, so its
bar is task quality: same-domain precision@k (the share of the ``k`` hits whose coarse label is
the query's) of exact search at the coarse prefix. A narrower beam than fine recall needs
usually reaches that bar, and the walk's cost grows with the beam.

The service's own graph (:class:`index.faiss_indexes.HnswIndex`, degree ``m``, built with
``ef_construction``) is built over the corpus's coarse prefixes in each storage (float32,
8-bit and 4-bit codes), searched at every efSearch of a sweep, one query per call on one
thread. The choice per storage is the narrowest beam from which every wider beam measured
reaches exact search's precision, to within :data:`TOLERANCE` (a wider beam can lose a hit to a
narrower one by chance, so one beam reaching the bar alone is not enough); none when the widest
beam does not.

The beam a graph needs grows slowly with its size, so a choice made on a bundle's corpus
(thousands of documents) is a floor for an index of millions: the service applies it only
when asked (``FRACTAL_FIRST_STAGE=bundle``), and ``FRACTAL_COARSE_EF_SEARCH`` overrides it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import faiss
import numpy as np

from index.faiss_indexes import HNSW_STORAGES, HnswIndex, HnswParams
from index.vectors import prefix_unit

K = 10
EF_VALUES = (10, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
"""Beams swept: from ``K`` up (FAISS walks with at least ``k`` candidates, so a narrower beam
is the same walk)."""
TIMED_QUERIES = 200
"""Queries timed per beam (precision uses them all)."""
TOLERANCE = 0.001
"""How far below exact search's precision a beam may be and count as reaching it: one hit in
a thousand, well below the precision's standard error at a thousand queries (about 0.01)."""


@dataclass(frozen=True)
class BeamPoint:
    """The graph in ``storage`` searched with ``ef_search``."""

    storage: str
    ef_search: int
    precision: float
    p50_us: float
    p99_us: float


@dataclass(frozen=True)
class CoarseBeamMeasurement:
    """Same-domain precision@k of exact search at prefix ``dim`` and of every beam, and the
    choice per storage (None where no beam reached exact search's precision)."""

    dim: int
    k: int
    m: int
    documents: int
    queries: int
    exact_precision: float
    points: tuple[BeamPoint, ...]
    choices: dict[str, BeamPoint | None]

    def ef_search(self, storage: str) -> int | None:
        """The chosen beam for graphs in ``storage``; None when none was chosen."""
        choice = self.choices.get(storage)
        return None if choice is None else choice.ef_search

    def markdown(self) -> list[str]:
        """A "Coarse beam" section: precision and p50 per beam and storage, and the choices."""
        beams = sorted({point.ef_search for point in self.points})
        lines = [
            "## Coarse beam",
            "",
            f"Same-domain precision@{self.k} at the {self.dim}-d coarse prefix "
            f"({self.documents:,} documents, {self.queries:,} queries, HNSW M{self.m}, one "
            f"thread): exact search reaches **{self.exact_precision:.3f}**. Each cell is "
            f"precision / p50 µs; the choice is the narrowest beam from which every wider one "
            f"is within {TOLERANCE} of exact search.",
            "",
            "| storage | " + " | ".join(f"ef {ef}" for ef in beams) + " |",
            "|---|" + "---|" * len(beams),
        ]
        for storage in self.choices:
            cells = {p.ef_search: p for p in self.points if p.storage == storage}
            lines.append(
                f"| {storage} | "
                + " | ".join(
                    f"{cells[ef].precision:.3f} / {cells[ef].p50_us:.0f}" if ef in cells else "—"
                    for ef in beams
                )
                + " |"
            )
        lines.append("")
        for storage, choice in self.choices.items():
            lines.append(
                f"- {storage}: the widest beam is below exact search's precision."
                if choice is None
                else f"- {storage}: **efSearch {choice.ef_search}** (precision "
                f"{choice.precision:.3f}, p50 {choice.p50_us:.0f} µs)."
            )
        return lines

    def to_json(self) -> dict:
        return {
            "dim": self.dim,
            "k": self.k,
            "m": self.m,
            "documents": self.documents,
            "queries": self.queries,
            "exact_precision": self.exact_precision,
            "choices": {
                storage: None if choice is None else asdict(choice)
                for storage, choice in self.choices.items()
            },
            "points": [asdict(point) for point in self.points],
        }


def _precision(found: np.ndarray, corpus_domains: np.ndarray, query_domains: np.ndarray) -> float:
    """The share of found hits (ids ≥ 0) in their query's domain, over ``k`` per query."""
    hit_domains = corpus_domains[np.maximum(found, 0)]
    same = (hit_domains == query_domains[:, None]) & (found >= 0)
    return float(same.sum()) / found.size


def measure_coarse_beam(
    corpus: np.ndarray,
    corpus_domains: np.ndarray,
    queries: np.ndarray,
    query_domains: np.ndarray,
    dim: int,
    *,
    storages: Sequence[str] = HNSW_STORAGES,
    ef_values: Sequence[int] = EF_VALUES,
    m: int = HnswParams.m,
    ef_construction: int = HnswParams.ef_construction,
    timed_queries: int = TIMED_QUERIES,
) -> CoarseBeamMeasurement:
    """Measure each storage's graph at prefix ``dim`` of ``corpus`` (embeddings ``[n, ≥dim]``,
    unnormalised) with ``queries``, against the coarse labels ``corpus_domains`` and
    ``query_domains``, and choose per storage (see the module docstring).

    FAISS runs on one thread while it measures; the caller's thread count is restored after."""
    if corpus.ndim != 2 or queries.ndim != 2 or min(corpus.shape[1], queries.shape[1]) < dim:
        raise ValueError(f"corpus and queries must be [n, >= {dim}], got {corpus.shape}")
    if corpus_domains.shape != (len(corpus),) or query_domains.shape != (len(queries),):
        raise ValueError("need one coarse label per corpus row and per query")
    if len(corpus) < K or not len(queries):
        raise ValueError(f"need at least {K} corpus rows and one query")
    unknown = set(storages) - set(HNSW_STORAGES)
    if unknown:
        raise ValueError(f"storages must be among {', '.join(HNSW_STORAGES)}: {sorted(unknown)}")
    vectors, asked = prefix_unit(corpus, dim), prefix_unit(queries, dim)
    exact = np.argsort(-(asked @ vectors.T), axis=1, kind="stable")[:, :K]
    exact_precision = _precision(exact, corpus_domains, query_domains)
    ids = np.arange(len(vectors), dtype=np.int64)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    points: list[BeamPoint] = []
    try:
        for storage in storages:
            params = HnswParams(m=m, ef_construction=ef_construction, storage=storage)
            graph = HnswIndex(dim, params, training=vectors if storage != "flat" else None)
            graph.add(ids, vectors)
            graph = graph.replacement() or graph  # numbered for locality, as the service's are
            for ef in ef_values:
                _, found = graph.search(asked, K, ef_search=ef)
                seconds = []
                for query in asked[:timed_queries]:
                    started = time.perf_counter()
                    graph.search(query[None, :], K, ef_search=ef)
                    seconds.append(time.perf_counter() - started)
                p50, p99 = np.percentile(seconds, [50, 99]) * 1e6
                precision = _precision(found, corpus_domains, query_domains)
                points.append(BeamPoint(storage, int(ef), precision, float(p50), float(p99)))
    finally:
        faiss.omp_set_num_threads(threads)
    choices = {
        storage: choose_beam(
            [point for point in points if point.storage == storage], exact_precision
        )
        for storage in storages
    }
    return CoarseBeamMeasurement(
        dim=int(dim),
        k=K,
        m=int(m),
        documents=len(corpus),
        queries=len(queries),
        exact_precision=exact_precision,
        points=tuple(points),
        choices=choices,
    )


def choose_beam(points: Sequence[BeamPoint], exact_precision: float) -> BeamPoint | None:
    """Of one graph's ``points``, the narrowest beam from which every wider one is within
    :data:`TOLERANCE` of ``exact_precision``; None when the widest is not."""
    chosen = None
    for point in sorted(points, key=lambda point: -point.ef_search):
        if point.precision < exact_precision - TOLERANCE:
            break
        chosen = point
    return chosen
