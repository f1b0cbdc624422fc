"""The C2F first stage chosen by measurement: every candidate's operating points, and the
fastest one reaching each recall floor within the memory budget."""

from __future__ import annotations

import numpy as np
import pytest

from index.first_stage import measure_first_stage

DIM = 32


@pytest.fixture
def data(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """1,500 documents and 60 queries around 30 centres."""
    centres = rng.standard_normal((30, DIM)).astype(np.float32)
    corpus = centres[rng.integers(0, 30, 1500)] + 0.4 * rng.standard_normal((1500, DIM))
    queries = centres[rng.integers(0, 30, 60)] + 0.4 * rng.standard_normal((60, DIM))
    return corpus.astype(np.float32), queries.astype(np.float32)


def test_every_candidate_is_measured_and_the_choice_is_the_fastest_within_budget(
    data: tuple[np.ndarray, np.ndarray],
) -> None:
    corpus, queries = data
    measured = measure_first_stage(
        corpus, queries, (16, DIM), degrees=(8,), ef_values=(8, 64), factors=(1, 4),
        floors=(0.5, 0.95), budget_bytes=10_000, timed_queries=20,
    )
    assert len(measured.points) == 2 * 4 * 1 * 2 * 2  # dims × storages × degrees × ef × factors
    assert {(p.candidate.dim, p.candidate.storage) for p in measured.points} == {
        (dim, storage) for dim in (16, DIM) for storage in ("sq8", "sq8u", "sq4", "tq4")
    }
    for point in measured.points:
        assert 0.0 <= point.recall <= 1.0 and point.p99_us >= point.p50_us > 0
        assert 0 < point.resident_bytes_per_doc < 10_000
    best = max(measured.points, key=lambda point: point.recall)
    assert best.recall >= 0.95  # a wide search of the full vectors finds these clusters' NN
    for floor, choice in measured.choices.items():
        assert choice is not None and choice.recall >= floor
        reaching = [p for p in measured.points if p.recall >= floor]
        assert choice.p50_us == min(point.p50_us for point in reaching)
    as_json = measured.to_json()
    assert as_json["choices"]["0.95"]["dim"] in (16, DIM) and len(as_json["points"]) == 32


def test_no_choice_where_nothing_fits_the_budget(data: tuple[np.ndarray, np.ndarray]) -> None:
    corpus, queries = data
    measured = measure_first_stage(
        corpus, queries, (DIM,), storages=("sq8",), degrees=(8,), ef_values=(16,),
        factors=(2,), budget_bytes=1, timed_queries=5,
    )
    assert measured.choices == {0.95: None, 0.99: None}


def test_bad_inputs_are_refused(data: tuple[np.ndarray, np.ndarray]) -> None:
    corpus, queries = data
    with pytest.raises(ValueError, match="storages"):
        measure_first_stage(corpus, queries, (DIM,), storages=("sq2",))
    with pytest.raises(ValueError, match="corpus and queries"):
        measure_first_stage(corpus, queries, (16,))


def test_packed_links_count_what_the_packed_graph_holds(
    data: tuple[np.ndarray, np.ndarray],
) -> None:
    """A natively walked graph (sq8) is measured with its links packed where asked: fewer
    resident bytes, the same answers; a graph FAISS walks (sq4) keeps FAISS's links."""
    corpus, queries = data

    def points(packed: bool) -> dict[str, tuple[float, float]]:
        measured = measure_first_stage(
            corpus, queries, (DIM,), storages=("sq8", "sq4"), degrees=(8,), ef_values=(32,),
            factors=(2,), packed_links=packed, timed_queries=5,
        )  # fmt: skip
        return {p.candidate.storage: (p.resident_bytes_per_doc, p.recall) for p in measured.points}

    faiss_links, packed = points(False), points(True)
    assert packed["sq8"][1] == faiss_links["sq8"][1]
    assert packed["sq8"][0] < faiss_links["sq8"][0] - 20  # M 8: 64 B of level-0 slots a node
    assert packed["sq4"] == faiss_links["sq4"]
