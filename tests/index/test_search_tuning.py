"""C2F's efSearch and factor measured on a collection as served: the sweep's recall against
exact search, the fastest point per floor, the record and when it applies."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from index.embedded import Collection
from index.faiss_indexes import HnswParams
from index.search_tuning import (
    TUNING_FILE,
    Graph,
    applicable_choice,
    measure_search_tuning,
    served_graph,
    write_tuning,
)

DIM, PREFIX = 32, 8


@pytest.fixture
def collection(tmp_path: Path, rng: np.random.Generator) -> Collection:
    """2,000 documents around 40 centres; an HNSW graph at the 8-d prefix only, M 8."""
    centres = rng.standard_normal((40, DIM))
    vectors = centres[rng.integers(0, 40, 2000)] + 0.5 * rng.standard_normal((2000, DIM))
    made = Collection(
        tmp_path / "c", DIM, (PREFIX, DIM), ("hnsw",),
        layout={PREFIX: ("hnsw",), DIM: ()}, hnsw=HnswParams(m=8, ef_construction=40),
    )  # fmt: skip
    ids = [f"doc-{n}" for n in range(len(vectors))]
    made.upsert(ids, ids, vectors.astype(np.float32), [{}] * len(ids))
    return made


def test_the_sweep_measures_recall_against_exact_search(collection: Collection) -> None:
    ids, queries = collection.sample_vectors(60, seed=3)
    assert len(ids) == 60 and queries.shape == (60, DIM)
    assert len(set(ids)) == 60
    # Exact search finds each stored query itself first, at cosine 1.
    exact = collection.search_exact(queries, 3).hits
    assert [hits[0].id for hits in exact] == ids
    assert all(hits[0].score == pytest.approx(1.0, abs=1e-5) for hits in exact)
    tuning = measure_search_tuning(
        collection, PREFIX, queries, ids, ef_values=(1, 128), factors=(1, 20),
        floors=(0.5, 0.95, 1.01), timed_queries=10,
    )  # fmt: skip
    assert tuning.graph == Graph(PREFIX, "flat", 8, 2000)
    points = {(p.ef_search, p.factor): p for p in tuning.points}
    assert set(points) == {(1, 1), (1, 20), (128, 1), (128, 20)}
    # An 8-d shortlist of k alone misses many 32-d neighbours; a long one from a wide walk
    # finds them all (2,000 documents).
    assert points[(128, 20)].recall >= 0.95
    assert points[(1, 1)].recall < points[(128, 20)].recall
    for floor, choice in tuning.choices.items():
        reaching = [p for p in tuning.points if p.recall >= floor]
        assert choice == min(reaching, key=lambda p: p.p50_us, default=None)
    assert tuning.choices[1.01] is None
    table = "\n".join(tuning.markdown())
    assert "| 128 |" in table and "no point reaches it" in table


def test_a_stored_query_does_not_count_itself(collection: Collection) -> None:
    """With its id given, a stored query's own document is out of its answer and its truth:
    named as a stranger instead, it would count as found by every point."""
    ids, queries = collection.sample_vectors(40, seed=5)
    options = {"ef_values": (1,), "factors": (1,), "timed_queries": 2}
    own = measure_search_tuning(collection, PREFIX, queries, ids, **options)
    stranger = measure_search_tuning(collection, PREFIX, queries, None, **options)
    assert own.points[0].recall < stranger.points[0].recall


def test_the_record_applies_only_to_the_graph_it_measured(
    collection: Collection, tmp_path: Path
) -> None:
    ids, queries = collection.sample_vectors(20)
    tuning = measure_search_tuning(
        collection, PREFIX, queries, ids, ef_values=(64,), factors=(8,), floors=(0.5,),
        timed_queries=5,
    )  # fmt: skip
    path = write_tuning(collection.path, tuning)
    assert path == collection.path / TUNING_FILE
    assert json.loads(path.read_text())["graph"] == {
        "dim": PREFIX, "storage": "flat", "m": 8, "documents": 2000
    }  # fmt: skip
    choice = applicable_choice(collection.path, Graph(PREFIX, "flat", 8, 5000), 0.5)
    assert choice is not None
    assert (choice["ef_search"], choice["factor"], choice["documents"]) == (64, 8, 2000)
    assert applicable_choice(collection.path, Graph(PREFIX, "sq8", 8, 2000), 0.5) is None
    assert applicable_choice(collection.path, Graph(PREFIX, "flat", 16, 2000), 0.5) is None
    assert applicable_choice(collection.path, Graph(PREFIX, "flat", 8, 2000), 0.99) is None
    assert applicable_choice(tmp_path / "elsewhere", Graph(PREFIX, "flat", 8, 2000), 0.5) is None
    path.write_text("{not json")
    with pytest.raises(ValueError, match="is not a search tuning record"):
        applicable_choice(collection.path, Graph(PREFIX, "flat", 8, 2000), 0.5)


def test_a_prefix_without_a_graph_has_nothing_to_tune(collection: Collection) -> None:
    with pytest.raises(ValueError, match="no HNSW graph at the shortlist prefix 32"):
        served_graph(collection, DIM)


@pytest.mark.parametrize(("train_size", "stores"), [(10_000, "flat"), (1_000, "sq8")])
def test_the_graph_is_named_by_what_it_stores(
    tmp_path: Path, rng: np.random.Generator, train_size: int, stores: str
) -> None:
    """An SQ8 graph stays float32 until enough vectors exist to learn its codes."""
    params = HnswParams(m=8, ef_construction=40, storage="sq8", sq_train_size=train_size)
    with Collection(tmp_path, DIM, (PREFIX, DIM), ("hnsw",), hnsw=params) as small:
        ids = [f"doc-{n}" for n in range(1500)]
        small.upsert(ids, ids, rng.standard_normal((1500, DIM)).astype(np.float32))
        assert served_graph(small, PREFIX) == Graph(PREFIX, stores, 8, 1500)
