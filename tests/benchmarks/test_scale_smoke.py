"""The scale benchmark's smoke run (toy labelled vectors, 20K documents) and the pieces its
numbers rest on: the labelled mixture, the streamed exact top-k and FAISS's size accounting."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import faiss
import numpy as np
import pytest

from benchmarks import scale
from benchmarks.harness.labelled_mixture import (
    LabelledMixture,
    LabelledReal,
    LabelledVectors,
    toy_labelled,
)
from benchmarks.harness.runner import Progress
from tests.benchmarks.smoke import run_smoke
from tests.tiny_bundle import DIM, build_tiny_bundle


@pytest.fixture(autouse=True)
def restore_faiss_threads() -> Iterator[None]:
    before = faiss.omp_get_max_threads()
    yield
    faiss.omp_set_num_threads(before)


def test_scale_smoke_run(tmp_path: Path) -> None:
    paths, report = run_smoke("scale", tmp_path)
    assert sorted(path.name for path in paths) == [
        f"scale_smoke.{s}" for s in ("json", "md", "png")
    ]
    (size,) = report["sizes"]
    assert size["n"] == scale.SMOKE.sizes[0]
    routes = {row["route"] for row in size["sweeps"]}
    assert routes == {"coarse", "c2f", "hnsw256"}
    shortlists = {row["shortlist_dim"] for row in size["sweeps"] if row["route"] == "c2f"}
    assert shortlists == set(scale.SMOKE.shortlist_dims)
    for row in size["sweeps"]:
        for key in ("recall_at_10", "domain_p10", "intent_p10"):
            assert 0.0 <= row[key] <= 1.0, row
        assert row["index_p50_us"] > 0 and row["p50_us"] > 0
    # Each layout's restart mapped the snapshot and the vector file: nothing was rebuilt.
    assert set(size["memory"]["graphs"]) == {str(dim) for dim in scale.SMOKE.shortlist_dims}
    for graph in size["memory"]["graphs"].values():
        recovery = graph["recovery"]
        assert recovery["rebuilt"] == {} and recovery["full_vectors"]["action"] == "mapped"
        assert graph["rss_anon_per_doc"] > 0 and graph["faiss_bytes_per_doc"] > 0
    assert set(size["points"]["c2f"]) == set(size["memory"]["graphs"])
    # C2F is swept over k′ and efSearch apart; its point is the fastest setting reaching the bar.
    grid = scale.c2f_settings(scale.SMOKE)
    for dim, entry in size["points"]["c2f"].items():
        rows = [r for r in size["sweeps"] if r["route"] == "c2f" and r["shortlist_dim"] == int(dim)]
        assert [(r["factor"], r["ef_search"]) for r in rows] == grid
        reaching = [r for r in rows if r["recall_at_10"] >= scale.SMOKE.recall_target]
        fastest = min((r["index_p50_us"] for r in reaching), default=None)
        assert (entry["point"] and entry["point"]["index_p50_us"]) == fastest
    assert size["exact"]["256"]["domain_p10"] > 0.9  # toy domains are far apart
    assert {row["set"] for row in report["fidelity"]["rows"]} == {"real", "synthetic"}
    assert len(report["targets"]) == 9
    points = size["points"]
    assert points["exact_coarse_precision"] == size["exact"]["64"]["domain_p10"]
    (coarse_to_fine,) = [t for t in report["targets"] if "exact 64-d search's" in t["target"]]
    if points["coarse_to_fine_p50"] is None:  # a bar not reached is named, never a number
        assert isinstance(coarse_to_fine["reached"], str) and not coarse_to_fine["met"]
    else:
        reached = points["coarse_at_exact_precision"]
        assert reached["domain_p10"] >= points["exact_coarse_precision"]
        assert coarse_to_fine["met"] == (coarse_to_fine["reached"] <= 0.5)
    markdown = (tmp_path / "scale_smoke.md").read_text(encoding="utf-8")
    assert "## N = 20,000" in markdown and "Synthetic against real" in markdown
    assert "Additional comparison, not a substitute for the target" in markdown


def test_mixture_draws_in_reproducible_chunks_with_the_fitted_labels() -> None:
    real = toy_labelled(3000, 32, seed=0)
    mixture = LabelledMixture.fit(real, rank=4, unlabelled_components=3, seed=0)
    assert set(mixture.intents[mixture.intents >= 0]) == set(real.intents[real.intents >= 0])
    whole = mixture.sample(2500, seed=7, chunk=1000)
    again = mixture.sample(2500, seed=7, chunk=1000)
    assert whole.vectors.shape == (2500, 32) and whole.vectors.dtype == np.float32
    np.testing.assert_array_equal(whole.vectors, again.vectors)
    labelled = whole.intents >= 0
    assert np.all((whole.domains >= 0) == labelled)
    # The toy hierarchy: intent i lies in domain i // 6.
    np.testing.assert_array_equal(whole.domains[labelled], whole.intents[labelled] // 6)


def test_running_top_k_over_blocks_is_exact_search() -> None:
    rng = np.random.default_rng(0)
    base = rng.standard_normal((1000, 16)).astype(np.float32)
    queries = rng.standard_normal((20, 16)).astype(np.float32)
    streamed = scale.RunningTopK(queries)
    for start in range(0, len(base), 300):
        streamed.add(base[start : start + 300], start)
    expected = np.argsort(-(queries @ base.T), axis=1)[:, : scale.K]
    np.testing.assert_array_equal(streamed.ids, expected)


def test_hnsw_accounting_matches_a_built_index() -> None:
    vectors = np.random.default_rng(0).standard_normal((5000, 32)).astype(np.float32)
    graph = faiss.IndexHNSWFlat(32, 16)
    graph.add(vectors)
    built = len(faiss.serialize_index(graph)) / len(vectors)
    assert scale.hnsw_bytes_per_vector(32, 16) == pytest.approx(built, rel=0.1)


def test_the_shortlist_graph_defaults_to_the_bundle_s_shortlist_prefix(tmp_path: Path) -> None:
    """Given no --shortlist-dims, the graph C2F is swept from is the bundle's shortlist prefix
    (the one the service indexes); without a bundle, the one measured on the real vectors."""
    quiet = Progress(enabled=False)
    build_tiny_bundle(tmp_path / "bundle", shortlist_dim=192)
    with_bundle = scale.Settings(bundle=tmp_path / "bundle", dim=DIM)
    assert scale.with_shortlist_dims(with_bundle, None, quiet).shortlist_dims == (192,)
    given = scale.Settings(bundle=tmp_path / "bundle", dim=DIM, shortlist_dims=(64,))
    assert scale.with_shortlist_dims(given, None, quiet).shortlist_dims == (64,)

    def real_set(vectors: np.ndarray) -> LabelledReal:
        labels = np.zeros(len(vectors), dtype=np.int64)
        parts = [LabelledVectors(part, labels[: len(part)], labels[: len(part)])
                 for part in (vectors[:2800], vectors[2800:])]
        return LabelledReal(*parts, (), (), {})

    # Everything in the first 128 coordinates: the 128-d prefix is the shortlist.
    signal = np.random.default_rng(0).standard_normal((3000, 256)).astype(np.float32)
    signal[:, 128:] *= 1e-3
    assert scale.with_shortlist_dims(scale.Settings(), real_set(signal), quiet).shortlist_dims == (
        128,
    )
    # Isotropic vectors: no prefix below 256 reaches the bar, and C2F has no graph to sweep.
    with pytest.raises(SystemExit, match="pass --shortlist-dims"):
        scale.with_shortlist_dims(scale.Settings(), real_set(signal / signal.std(0)), quiet)
