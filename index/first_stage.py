"""The C2F first stage chosen by measurement: which graph a coarse-to-fine search should walk
(its prefix, how it stores vectors, its degree) and with which knobs, on a bundle's own vectors.

Each candidate is an HNSW graph over a trained prefix (the full dimension included) storing
8-bit or 4-bit scalar-quantised codes of each coordinate's range (``sq8``, ``sq4``), 8-bit codes
of one range over all coordinates (``sq8u``) or 4-bit TurboQuant codes (``tq4``), at degree
``M`` 16 or 32. It is
searched the way the service searches: the native funnel (:mod:`index.funnel`) walks the graph
for a shortlist of ``k × factor`` and re-ranks it exactly at the full dimension against float16
full vectors, one query per call on one thread. Every (efSearch, factor) pair of a small sweep
gives an operating point: recall@k against exact full-dimension search, p50 and p99 latency,
and the bytes per document that must stay resident (the graph's codes and links, packed where
the service would pack them: :meth:`index.faiss_indexes.HnswIndex.seal`; the full vectors are
file-backed in the service).

The choice for a recall floor is the fastest point (p50) that reaches it within the resident
budget per document; none when no point does. Latency measured on a bundle's corpus (thousands
of documents) ranks the candidates' cost per visited node, not the absolute time at millions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import faiss
import numpy as np

from index.faiss_indexes import SQ_QUANTIZERS, HnswIndex, HnswParams
from index.funnel import Funnel
from index.graph_order import reordered

DEGREES = (16, 32)
EF_VALUES = (16, 32, 64, 128, 256)
FACTORS = (2, 4, 8)
FLOORS = (0.95, 0.99)
BUDGET_SHARE = 1 / 3
"""Resident bytes per document a first stage may hold (codes plus links), as a share of an
``HNSW32,Flat`` graph's at the full dimension (float32 vectors and level-0 links)."""
K = 10
EF_CONSTRUCTION = 100
TIMED_QUERIES = 200
"""Queries timed per operating point (recall uses them all)."""


@dataclass(frozen=True)
class Candidate:
    """One first stage: an HNSW graph at prefix ``dim`` storing ``storage`` codes, degree ``m``."""

    dim: int
    storage: str
    m: int


@dataclass(frozen=True)
class OperatingPoint:
    """A candidate searched with ``ef_search`` and a shortlist of ``k × factor``."""

    candidate: Candidate
    ef_search: int
    factor: int
    recall: float
    p50_us: float
    p99_us: float
    resident_bytes_per_doc: float


@dataclass(frozen=True)
class FirstStageMeasurement:
    """Every operating point, and the choice per recall floor (None where none reached it)."""

    k: int
    documents: int
    queries: int
    budget_bytes_per_doc: int
    points: tuple[OperatingPoint, ...]
    choices: dict[float, OperatingPoint | None]

    def markdown(self) -> list[str]:
        """A "C2F first stage" section: each candidate's fastest point per floor, and the
        choices, one line each."""
        lines = [
            "## C2F first stage",
            "",
            f"The native funnel per candidate graph (prefix, codes, degree M), {self.documents:,} "
            f"documents, {self.queries:,} queries, one thread: the lowest p50 reaching each "
            f"recall@{self.k} floor, and the resident bytes per document (codes and links).",
            "",
            "| first stage | B/doc | " + " | ".join(f"p50 µs ≥ {f}" for f in self.choices) + " |",
            "|---|---|" + "---|" * len(self.choices),
        ]
        candidates = dict.fromkeys(point.candidate for point in self.points)
        for candidate in candidates:
            mine = [point for point in self.points if point.candidate == candidate]
            cells = []
            for floor in self.choices:
                reaching = [point.p50_us for point in mine if point.recall >= floor]
                cells.append(f"{min(reaching):.0f}" if reaching else "—")
            lines.append(
                f"| {candidate.dim}-d {candidate.storage} M{candidate.m} | "
                f"{mine[0].resident_bytes_per_doc:.0f} | " + " | ".join(cells) + " |"
            )
        lines.append("")
        for floor, choice in self.choices.items():
            if choice is None:
                lines.append(
                    f"- recall@{self.k} ≥ {floor}: no candidate within "
                    f"{self.budget_bytes_per_doc} B/doc reaches it."
                )
            else:
                c = choice.candidate
                lines.append(
                    f"- recall@{self.k} ≥ {floor}: **{c.dim}-d {c.storage} M{c.m}**, efSearch "
                    f"{choice.ef_search}, shortlist {self.k}×{choice.factor} (recall "
                    f"{choice.recall:.3f}, p50 {choice.p50_us:.0f} µs)."
                )
        return lines

    def to_json(self) -> dict:
        def point(value: OperatingPoint | None) -> dict | None:
            if value is None:
                return None
            flat = asdict(value)
            return {**flat.pop("candidate"), **flat}

        return {
            "k": self.k,
            "documents": self.documents,
            "queries": self.queries,
            "budget_bytes_per_doc": self.budget_bytes_per_doc,
            "choices": {str(floor): point(choice) for floor, choice in self.choices.items()},
            "points": [point(value) for value in self.points],
        }


def _unit(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.ascontiguousarray(matrix / np.maximum(norms, 1e-12), dtype=np.float32)


def _graph(corpus: np.ndarray, candidate: Candidate) -> faiss.IndexIDMap:
    """The candidate's graph over the corpus's unit prefixes, ID-mapped as the service's are
    (id ``i`` is document ``i``), its nodes numbered for locality from the size at which the
    service numbers its own (:mod:`index.graph_order`)."""
    vectors = _unit(corpus[:, : candidate.dim])
    graph = faiss.IndexHNSWSQ(
        candidate.dim,
        SQ_QUANTIZERS[candidate.storage],  # type: ignore[arg-type]  # the stubs want the object
        candidate.m,
        faiss.METRIC_INNER_PRODUCT,
    )
    graph.hnsw.efConstruction = EF_CONSTRUCTION
    graph.train(vectors)
    mapped = faiss.IndexIDMap(graph)
    mapped.add_with_ids(vectors, np.arange(len(vectors), dtype=np.int64))
    if len(vectors) >= HnswParams.locality_from:
        return reordered(mapped)
    return mapped


def _resident_bytes(index: HnswIndex) -> float:
    """Codes and links per node: the graph's bytes less its id map's 8 per node."""
    return index.nbytes() / max(len(index), 1) - 8


def _sweep(
    funnel: Funnel,
    candidate: Candidate,
    queries: np.ndarray,
    truth: np.ndarray,
    resident: float,
    ef_values: Sequence[int],
    factors: Sequence[int],
    timed: int,
) -> list[OperatingPoint]:
    points = []
    for ef in ef_values:
        for factor in factors:
            _, found = funnel.search(queries, K, K * factor, ef)
            hits = (found[:, :, None] == truth[:, None, :]).any(axis=2).sum()
            seconds = []
            for query in queries[:timed]:
                started = time.perf_counter()
                funnel.search(query[None, :], K, K * factor, ef)
                seconds.append(time.perf_counter() - started)
            p50, p99 = np.percentile(seconds, [50, 99]) * 1e6
            recall = float(hits) / truth.size
            points.append(
                OperatingPoint(candidate, ef, factor, recall, float(p50), float(p99), resident)
            )
    return points


def measure_first_stage(
    corpus: np.ndarray,
    queries: np.ndarray,
    prefix_dims: Sequence[int],
    *,
    storages: Sequence[str] = tuple(SQ_QUANTIZERS),
    degrees: Sequence[int] = DEGREES,
    ef_values: Sequence[int] = EF_VALUES,
    factors: Sequence[int] = FACTORS,
    floors: Sequence[float] = FLOORS,
    budget_bytes: int | None = None,
    packed_links: bool = HnswParams.packed_links,
    timed_queries: int = TIMED_QUERIES,
    progress: Callable[[int], object] = lambda done: None,
) -> FirstStageMeasurement:
    """Measure every candidate on ``corpus`` (full embeddings, ``[n, dim]``, ``dim`` the last of
    ``prefix_dims``) with ``queries``, and choose per recall floor (see the module docstring)
    within ``budget_bytes`` per document (default: :data:`BUDGET_SHARE` of ``HNSW32,Flat``'s),
    each graph's links packed where ``packed_links`` and its walk would pack them.
    ``progress`` is called with the candidates done after each.

    FAISS runs on one thread while it measures (the service's per-query cost); the caller's
    thread count is restored after."""
    full_dim = int(prefix_dims[-1])
    if corpus.ndim != 2 or queries.ndim != 2 or corpus.shape[1] != full_dim:
        raise ValueError(f"corpus and queries must be [n, {full_dim}], got {corpus.shape}")
    if queries.shape[1] != full_dim or len(corpus) < K or not len(queries):
        raise ValueError(f"need [n, {full_dim}] queries and at least {K} corpus rows")
    unknown = set(storages) - set(SQ_QUANTIZERS)
    if unknown:
        raise ValueError(
            f"storages must be among {', '.join(SQ_QUANTIZERS)}, got {sorted(unknown)}"
        )
    if budget_bytes is None:
        budget_bytes = int(BUDGET_SHARE * (4 * full_dim + 4 * 2 * 32))
    full_corpus, full_queries = _unit(corpus), _unit(queries)
    exact = full_queries @ full_corpus.T
    truth = np.argsort(-exact, axis=1, kind="stable")[:, :K]
    refine = faiss.IndexScalarQuantizer(
        full_dim,
        faiss.ScalarQuantizer.QT_fp16,  # type: ignore[arg-type]  # the stubs want the object
        faiss.METRIC_INNER_PRODUCT,
    )
    refine.add(full_corpus)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    points: list[OperatingPoint] = []
    try:
        for dim in prefix_dims:
            for storage in storages:
                for m in degrees:
                    candidate = Candidate(int(dim), storage, int(m))
                    graph = _graph(corpus, candidate)
                    params = HnswParams(
                        m=candidate.m, storage=candidate.storage, packed_links=packed_links
                    )
                    index = HnswIndex(candidate.dim, params, graph)
                    index.seal()
                    funnel = Funnel(index, candidate.dim, refine)
                    points += _sweep(
                        funnel,
                        candidate,
                        full_queries,
                        truth,
                        _resident_bytes(index),
                        ef_values,
                        factors,
                        timed_queries,
                    )
                    progress(len(points) // (len(ef_values) * len(factors)))
    finally:
        faiss.omp_set_num_threads(threads)
    choices: dict[float, OperatingPoint | None] = {}
    for floor in floors:
        fit = [
            point
            for point in points
            if point.recall >= floor and point.resident_bytes_per_doc <= budget_bytes
        ]
        choices[float(floor)] = min(fit, key=lambda point: point.p50_us) if fit else None
    return FirstStageMeasurement(K, len(corpus), len(queries), budget_bytes, tuple(points), choices)
