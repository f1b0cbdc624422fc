"""C2F's efSearch and shortlist factor measured on a collection as it is served: its own graph,
at its own size, with its own documents (``fractal tune``).

The export chooses which graph C2F walks on the bundle's corpus (:mod:`index.first_stage`), but
how wide the walk must be, and how long the shortlist, grow with the collection: a setting that
reaches recall@10 0.95 on 50,000 documents falls short at a million. So this sweeps the served
graph itself: for every (efSearch, factor) of a grid, the collection's own ``search_c2f`` (the
native funnel, hits named with their contents, as the service calls it) answers each query on
one thread, after one untimed pass at the widest setting warms the page cache; recall@k is
against exact full-dimension search over every stored document.

The queries are texts the caller gives (encoded with the bundle), or stored documents drawn at
random; a document's own row is then taken out of both its answer and its truth, which still
flatters the graph a little (the query is a node of it, well linked to its neighbours).

The choice per recall floor is the fastest point (p50) that reaches it; none when no point does.
The record (:data:`TUNING_FILE` in the collection's folder) names the graph it was measured on
and the documents it held; the service applies it only while it serves that graph
(:func:`applicable_choice`), and warns when the collection has since grown or shrunk past
:data:`DRIFT`-fold.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from index.embedded import Collection
from index.first_stage import FLOORS

TUNING_FILE = "search_tuning.json"
FIRST_STAGES_FILE = "first_stages.json"
"""``fractal tune --first-stages``'s record: every first stage measured on the collection's own
documents (:func:`index.first_stage.measure_first_stage`), which the service shows
(:func:`recorded_first_stage`) and, with ``FRACTAL_FIRST_STAGE=index``, builds the collection's
graphs from (:meth:`index.settings.StorageSettings.first_stage_choice`)."""
K = 10
EF_VALUES = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384)
FACTORS = (2, 4, 8)
TIMED_QUERIES = 300
"""Queries timed one by one per point (recall uses them all)."""
DRIFT = 2.0
"""How many times larger or smaller than when it was measured a collection may be before the
service warns that its tuning is stale."""


@dataclass(frozen=True)
class Graph:
    """The graph C2F walks: its prefix, codes, degree, and the documents it held."""

    dim: int
    storage: str
    m: int
    documents: int


@dataclass(frozen=True)
class TuningPoint:
    ef_search: int
    factor: int
    recall: float
    p50_us: float
    p99_us: float


@dataclass(frozen=True)
class SearchTuning:
    """Every point of the sweep on ``graph`` and the choice per recall floor."""

    graph: Graph
    k: int
    queries: int
    query_source: str
    points: tuple[TuningPoint, ...]
    choices: dict[float, TuningPoint | None]

    def to_json(self) -> dict[str, Any]:
        return {
            "graph": asdict(self.graph),
            "k": self.k,
            "queries": self.queries,
            "query_source": self.query_source,
            "choices": {
                str(floor): None if choice is None else asdict(choice)
                for floor, choice in self.choices.items()
            },
            "points": [asdict(point) for point in self.points],
        }

    def markdown(self) -> list[str]:
        """The sweep as a table (recall / p50 µs per efSearch and factor) and the choices."""
        factors = sorted({point.factor for point in self.points})
        graph = self.graph
        lines = [
            f"C2F on the served {graph.dim}-d {graph.storage} M{graph.m} graph, "
            f"{graph.documents:,} documents, {self.queries:,} queries ({self.query_source}), "
            f"one thread: recall@{self.k} against exact full-dimension search / p50 µs.",
            "",
            "| efSearch | " + " | ".join(f"shortlist {self.k}×{f}" for f in factors) + " |",
            "|---|" + "---|" * len(factors),
        ]
        cells = {(point.ef_search, point.factor): point for point in self.points}
        for ef in sorted({point.ef_search for point in self.points}):
            row = [cells.get((ef, factor)) for factor in factors]
            lines.append(
                f"| {ef} | "
                + " | ".join("—" if p is None else f"{p.recall:.3f} / {p.p50_us:.0f}" for p in row)
                + " |"
            )
        lines.append("")
        for floor, choice in self.choices.items():
            lines.append(
                f"- recall@{self.k} ≥ {floor}: no point reaches it."
                if choice is None
                else f"- recall@{self.k} ≥ {floor}: **efSearch {choice.ef_search}, factor "
                f"{choice.factor}** (recall {choice.recall:.3f}, p50 {choice.p50_us:.0f} µs, "
                f"p99 {choice.p99_us:.0f} µs)."
            )
        return lines


def served_graph(collection: Collection, shortlist_dim: int) -> Graph:
    """The HNSW graph C2F walks in ``collection`` at ``shortlist_dim``, storing what it stores
    now (an SQ graph stays float32 until it has trained its codes); :class:`ValueError` when
    there is none."""
    storage = collection.graph_storage(shortlist_dim)
    if storage is None:
        raise ValueError(
            f"the collection has no HNSW graph at the shortlist prefix {shortlist_dim}: "
            "nothing to tune"
        )
    return Graph(shortlist_dim, storage, collection.hnsw.m, collection.stats().documents)


def measure_search_tuning(
    collection: Collection,
    shortlist_dim: int,
    queries: np.ndarray,
    query_ids: Sequence[str] | None = None,
    *,
    ef_values: Sequence[int] = EF_VALUES,
    factors: Sequence[int] = FACTORS,
    floors: Sequence[float] = FLOORS,
    timed_queries: int = TIMED_QUERIES,
    progress: Callable[[int], object] = lambda done: None,
) -> SearchTuning:
    """Sweep C2F on ``collection``'s graph at ``shortlist_dim`` with ``queries`` (full
    vectors). ``query_ids``: the stored documents the queries are (their own rows are left out
    of answers and truth); None for queries from elsewhere. ``progress`` is called with the
    points done after each."""
    graph = served_graph(collection, shortlist_dim)
    own = list(query_ids) if query_ids is not None else None
    if own is not None and len(own) != len(queries):
        raise ValueError("query_ids must name one document per query")
    extra = 1 if own is not None else 0
    exact = _ids(collection.search_exact(queries, K + extra).hits)
    truth = [_without(ids, own, position) for position, ids in enumerate(exact)]
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    points: list[TuningPoint] = []
    try:
        # Untimed, the widest walk and shortlist first: the pages any point reads are in the
        # page cache before the first is timed, as in a service that has been serving.
        collection.search_c2f(
            queries, K + extra, shortlist_dim, max(factors), "hnsw", ef_search=max(ef_values)
        )
        for ef in ef_values:
            for factor in factors:
                found = collection.search_c2f(
                    queries, K + extra, shortlist_dim, factor, "hnsw", ef_search=ef
                ).hits
                hits = sum(
                    len(set(_without(ids, own, i)) & set(truth[i]))
                    for i, ids in enumerate(_ids(found))
                )
                seconds = []
                for query in queries[:timed_queries]:
                    started = time.perf_counter()
                    collection.search_c2f(
                        query[None, :], K + extra, shortlist_dim, factor, "hnsw",
                        ef_search=ef, contents=True,
                    )  # fmt: skip
                    seconds.append(time.perf_counter() - started)
                p50, p99 = np.percentile(seconds, [50, 99]) * 1e6
                recall = hits / max(sum(len(ids) for ids in truth), 1)
                points.append(TuningPoint(int(ef), int(factor), recall, float(p50), float(p99)))
                progress(len(points))
    finally:
        faiss.omp_set_num_threads(threads)
    choices = {
        float(floor): min(
            (point for point in points if point.recall >= floor),
            key=lambda point: point.p50_us,
            default=None,
        )
        for floor in floors
    }
    source = "stored documents, their own row left out" if own is not None else "given texts"
    return SearchTuning(graph, K, len(queries), source, tuple(points), choices)


def _ids(hits: list[list[Any]]) -> list[list[str]]:
    return [[hit.id for hit in query_hits] for query_hits in hits]


def _without(ids: list[str], own: list[str] | None, position: int) -> list[str]:
    """A query's first ``K`` ids, without the query's own document."""
    if own is None:
        return ids[:K]
    return [doc_id for doc_id in ids if doc_id != own[position]][:K]


def write_tuning(folder: Path, tuning: SearchTuning) -> Path:
    """The record in ``folder``, written by :func:`write_record`."""
    return write_record(folder / TUNING_FILE, tuning.to_json())


def write_record(path: Path, record: dict[str, Any]) -> Path:
    """``record`` as JSON at ``path``, atomically: written beside, then renamed."""
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    partial.replace(path)
    return path


def applicable_choice(folder: Path | None, graph: Graph, floor: float) -> dict[str, Any] | None:
    """The choice at ``floor`` recorded in ``folder`` (``ef_search``, ``factor`` and what they
    measured, with the documents the graph then held), when the record was measured on
    ``graph``'s prefix, codes and degree; None otherwise, or without a record or a choice at
    that floor. An unreadable record is a :class:`ValueError` naming it."""
    found = _read_record(folder, TUNING_FILE, "search tuning")
    if found is None:
        return None
    record, path = found
    try:
        measured = (record["graph"]["dim"], record["graph"]["storage"], record["graph"]["m"])
        choice = record["choices"].get(str(floor))
        documents = record["graph"]["documents"]
    except (KeyError, TypeError, AttributeError) as exc:
        raise _unreadable(path, "search tuning", exc) from None
    if measured != (graph.dim, graph.storage, graph.m) or not isinstance(choice, dict):
        return None
    return {**choice, "documents": documents}


def recorded_first_stage(folder: Path | None, floor: float) -> dict[str, Any] | None:
    """The fastest first stage at ``floor`` that ``fractal tune --first-stages`` measured on
    the collection's own documents (:data:`FIRST_STAGES_FILE` in ``folder``), with the documents
    it measured on; None without a record or a choice at that floor. An unreadable record is a
    :class:`ValueError` naming it."""
    found = _read_record(folder, FIRST_STAGES_FILE, "first-stage")
    if found is None:
        return None
    record, path = found
    try:
        choice = record["choices"].get(str(floor))
        documents = record["documents"]
    except (KeyError, TypeError, AttributeError) as exc:
        raise _unreadable(path, "first-stage", exc) from None
    return {**choice, "documents": documents} if isinstance(choice, dict) else None


def _read_record(folder: Path | None, name: str, what: str) -> tuple[Any, Path] | None:
    """The JSON record ``name`` in ``folder`` and its path; None where there is none."""
    path = None if folder is None else folder / name
    if path is None or not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8")), path
    except ValueError as exc:
        raise _unreadable(path, what, exc) from None


def _unreadable(path: Path, what: str, exc: Exception) -> ValueError:
    return ValueError(
        f"{path} is not a {what} record ({exc!r}); run fractal tune again or remove it"
    )


def drifted(measured_documents: int, documents: int) -> bool:
    """Whether a collection of ``documents`` is more than :data:`DRIFT` times larger or smaller
    than the ``measured_documents`` its tuning was measured on."""
    low, high = sorted((max(measured_documents, 1), max(documents, 1)))
    return high > DRIFT * low
