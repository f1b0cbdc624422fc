"""The coarse route's beam chosen by measurement: same-domain precision of exact search and of
the service's own graph at each beam, and the narrowest beam from which every wider one keeps
exact search's precision."""

from __future__ import annotations

import numpy as np
import pytest

from index.coarse_beam import TOLERANCE, BeamPoint, choose_beam, measure_coarse_beam
from index.faiss_indexes import HNSW_STORAGES

DIM = 32
COARSE = 8


@pytest.fixture
def data(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """2,000 documents and 100 queries in 6 domains of 5 intents each; the domain shows in the
    first ``COARSE`` dimensions, the intent in the rest, with noise that blurs the domains."""
    domain_centres = rng.standard_normal((6, COARSE))
    intent_centres = rng.standard_normal((30, DIM - COARSE))

    def draw(count: int) -> tuple[np.ndarray, np.ndarray]:
        intents = rng.integers(0, 30, count)
        domains = intents // 5
        head = domain_centres[domains] + 0.9 * rng.standard_normal((count, COARSE))
        tail = intent_centres[intents] + 0.4 * rng.standard_normal((count, DIM - COARSE))
        return np.hstack([head, tail]).astype(np.float32), domains

    corpus, corpus_domains = draw(2000)
    queries, query_domains = draw(100)
    return corpus, corpus_domains, queries, query_domains


def _exact_precision(corpus, corpus_domains, queries, query_domains) -> float:
    """A naive loop: each query's 10 nearest by cosine at the coarse prefix, their domains."""
    unit = corpus[:, :COARSE] / np.linalg.norm(corpus[:, :COARSE], axis=1, keepdims=True)
    same = 0
    for query, domain in zip(queries, query_domains, strict=True):
        scores = unit @ (query[:COARSE] / np.linalg.norm(query[:COARSE]))
        same += int((corpus_domains[np.argsort(-scores, kind="stable")[:10]] == domain).sum())
    return same / (10 * len(queries))


def test_every_beam_is_measured_against_exact_search(data) -> None:
    measured = measure_coarse_beam(*data, COARSE, ef_values=(2, 16, 256), timed_queries=10)
    assert measured.exact_precision == pytest.approx(_exact_precision(*data))
    assert 0.3 < measured.exact_precision < 0.99  # the domains are blurred, not separable
    assert {(p.storage, p.ef_search) for p in measured.points} == {
        (storage, ef) for storage in HNSW_STORAGES for ef in (2, 16, 256)
    }
    for point in measured.points:
        assert 0.0 <= point.precision <= 1.0 and point.p99_us >= point.p50_us > 0
    widest_flat = next(p for p in measured.points if (p.storage, p.ef_search) == ("flat", 256))
    # At 2,000 documents a beam of 256 walks most of the graph: exact search's answer.
    assert widest_flat.precision == pytest.approx(measured.exact_precision, abs=TOLERANCE)
    for storage, choice in measured.choices.items():
        mine = [p for p in measured.points if p.storage == storage]
        assert choice == choose_beam(mine, measured.exact_precision)
    assert measured.ef_search("flat") is not None
    recorded = measured.to_json()
    assert recorded["dim"] == COARSE and set(recorded["choices"]) == set(HNSW_STORAGES)
    assert len(recorded["points"]) == 3 * len(HNSW_STORAGES)
    table = "\n".join(measured.markdown())
    assert table.startswith("## Coarse beam") and "| sq4 |" in table


def _points(*precisions: tuple[int, float]) -> list[BeamPoint]:
    return [BeamPoint("flat", ef, precision, 1.0, 2.0) for ef, precision in precisions]


def test_the_choice_is_the_narrowest_beam_from_which_every_wider_one_holds() -> None:
    # ef 8 reaches the bar by chance, ef 12 does not: the choice is 16, not 8.
    points = _points((4, 0.80), (8, 0.90), (12, 0.89), (16, 0.8995), (32, 0.90), (64, 0.90))
    chosen = choose_beam(points, exact_precision=0.90)
    assert chosen is not None and chosen.ef_search == 16
    assert choose_beam(_points((8, 0.91), (16, 0.90)), 0.90).ef_search == 8  # type: ignore[union-attr]


def test_no_beam_is_chosen_when_the_widest_falls_short() -> None:
    assert choose_beam(_points((8, 0.90), (256, 0.897)), exact_precision=0.90) is None
    assert choose_beam([], exact_precision=0.5) is None


def test_bad_shapes_are_refused(data) -> None:
    corpus, corpus_domains, queries, query_domains = data
    with pytest.raises(ValueError, match="one coarse label per"):
        measure_coarse_beam(corpus, corpus_domains[:-1], queries, query_domains, COARSE)
    with pytest.raises(ValueError, match=r"\[n, >= 64\]"):
        measure_coarse_beam(corpus, corpus_domains, queries, query_domains, 64)
    with pytest.raises(ValueError, match="storages must be among"):
        measure_coarse_beam(*data, COARSE, storages=("pq",))
