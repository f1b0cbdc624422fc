"""Timing and recall shared by the search benchmarks.

Latency is measured round-robin: every round runs each configuration over all queries in turn,
so a change in the machine's load during the run hits all configurations alike and the ratios
between them stay fair. Single-query latency times one ``search`` call per query (the query is a
``(1, dim)`` row); batch throughput times one call with all queries at once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import faiss
import numpy as np


@contextmanager
def faiss_threads(count: int) -> Iterator[None]:
    """FAISS's OpenMP threads set to ``count`` (0: every core) inside the block, restored after."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(count or os.cpu_count() or 1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


Search = Callable[[np.ndarray], object]
"""Runs one search for a ``(n, dim)`` query matrix; its result is not used for timing."""


@dataclass(frozen=True)
class Case:
    """One configuration to time: a search and the query matrix it takes."""

    search: Search
    queries: np.ndarray


@dataclass(frozen=True)
class Latency:
    """Single-query latency percentiles (µs) and batch throughput (queries per second)."""

    p50_us: float
    p99_us: float
    batch_qps: float

    def to_json(self) -> dict:
        return {"p50_us": self.p50_us, "p99_us": self.p99_us, "batch_qps": self.batch_qps}


def measure(cases: Mapping[str, Case], rounds: int) -> dict[str, Latency]:
    """Time every case round-robin: ``rounds`` passes of single queries, then of one batch.

    One untimed warm-up query per case comes first. Percentiles are over all single-query
    timings of all rounds; throughput uses the median batch time.
    """
    single: dict[str, list[np.ndarray]] = {name: [] for name in cases}
    batch: dict[str, list[float]] = {name: [] for name in cases}
    for case in cases.values():
        case.search(case.queries[:1])
    for _ in range(rounds):
        for name, case in cases.items():
            search, queries = case.search, case.queries
            timings = np.empty(len(queries))
            for i in range(len(queries)):
                row = queries[i : i + 1]
                start = time.perf_counter_ns()
                search(row)
                timings[i] = time.perf_counter_ns() - start
            single[name].append(timings / 1e3)
    for _ in range(rounds):
        for name, case in cases.items():
            start = time.perf_counter()
            case.search(case.queries)
            batch[name].append(time.perf_counter() - start)
    latencies = {}
    for name, case in cases.items():
        pooled = np.concatenate(single[name])
        latencies[name] = Latency(
            p50_us=float(np.percentile(pooled, 50)),
            p99_us=float(np.percentile(pooled, 99)),
            batch_qps=len(case.queries) / float(np.median(batch[name])),
        )
    return latencies


def recall_at_k(found: np.ndarray, truth: np.ndarray, k: int) -> float:
    """Mean over queries of ``|found[:k] ∩ truth[:k]| / k`` (ids; -1 marks a missing result)."""
    hits = [
        len(np.intersect1d(row[:k][row[:k] >= 0], true_row[:k]))
        for row, true_row in zip(found, truth, strict=True)
    ]
    return float(np.mean(hits)) / k


def exact_neighbours(
    base: np.ndarray, queries: np.ndarray, k: int, block: int = 1_000_000
) -> np.ndarray:
    """Ids of the ``k`` largest inner products per query, by brute force (``IndexFlatIP``).

    The base is searched ``block`` rows at a time and the blocks' best merged, so that a base
    larger than memory (a memory-mapped file) needs one block of it in memory at once."""
    scores = np.full((len(queries), 0), -np.inf, np.float32)
    ids = np.empty((len(queries), 0), np.int64)
    for start in range(0, len(base), block):
        index = faiss.IndexFlatIP(base.shape[1])
        index.add(np.ascontiguousarray(base[start : start + block], np.float32))
        found_scores, found_ids = index.search(queries, min(k, index.ntotal))
        scores = np.concatenate([scores, found_scores], axis=1)
        ids = np.concatenate([ids, found_ids + start], axis=1)
        best = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        scores = np.take_along_axis(scores, best, axis=1)
        ids = np.take_along_axis(ids, best, axis=1)
    return ids


def first_reaching(
    rows: Sequence[Mapping], target: float, knob: str, recall: str = "recall_at_10"
) -> Mapping | None:
    """The row with the smallest ``knob`` (efSearch, shortlist factor…) whose ``recall`` is at
    least ``target``, or None when no row reaches it.

    This is how latencies are compared at equal recall: each method at its cheapest setting
    that reaches the same recall floor.
    """
    reaching = [row for row in rows if row[recall] >= target]
    return min(reaching, key=lambda row: row[knob]) if reaching else None


Row = TypeVar("Row", bound=Mapping)


def fastest_reaching(
    rows: Sequence[Row], target: float, time: str = "p50_us", recall: str = "recall_at_10"
) -> Row | None:
    """The row with the lowest ``time`` whose ``recall`` is at least ``target``, or None when no
    row reaches it: a method's operating point when it has more than one knob (efSearch and a
    shortlist length), so that no one knob's order decides it."""
    reaching = [row for row in rows if row[recall] >= target]
    return min(reaching, key=lambda row: row[time]) if reaching else None


def frontier(rows: Sequence[Row], time: str = "p50_us", recall: str = "recall_at_10") -> list[Row]:
    """The rows no faster row matches in ``recall``, fastest first: the recall a method buys
    for its time, whichever knobs set it."""
    kept: list[Row] = []
    for row in sorted(rows, key=lambda row: row[time]):
        if not kept or row[recall] > kept[-1][recall]:
            kept.append(row)
    return kept
