"""The paper's evaluation on tiny hand-built inputs whose answers are worked out by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from training.data.dataset import build_hierarchy
from training.evaluation.evaluate import EmbeddingEvaluation, evaluate_embeddings
from training.evaluation.report import RunResult, compare, write_report
from training.evaluation.retrieval import recall_at_1_table
from training.evaluation.stats import holm_adjust, mean_sd, paired_comparison
from training.evaluation.steerability import (
    SteerabilityScores,
    prefix_ramp,
    steerability,
    steerability_auc,
    steerability_gap,
    steerability_mono,
)
from training.evaluation.workload import ALPHAS, crossover_alpha, workload_curve

PREFIX_DIMS = [64, 128, 192, 256]

# Coarse accuracy falls and fine accuracy rises with the prefix: a steerable table.
STEERABLE = np.array(
    [
        [0.98, 0.97, 0.96, 0.95],
        [0.80, 0.85, 0.88, 0.90],
    ]
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# --- steerability -------------------------------------------------------------------------------


def test_steerability_is_eq_1() -> None:
    # (0.98 − 0.95) + (0.90 − 0.80)
    assert steerability(STEERABLE) == pytest.approx(0.13)


def test_steerability_on_three_levels_is_s02_and_ignores_the_middle_level() -> None:
    table = np.array(
        [
            [0.986, 0.989, 0.990, 0.991],
            [0.10, 0.90, 0.20, 0.80],
            [0.927, 0.947, 0.954, 0.959],
        ]
    )
    # (0.986 − 0.991) + (0.959 − 0.927) = −0.005 + 0.032
    assert steerability(table) == pytest.approx(0.027)


def test_steerability_auc_averages_first_prefix_against_each_longer_one() -> None:
    # j=2: 0.01 + 0.05; j=3: 0.02 + 0.08; j=4: 0.03 + 0.10 → (0.06 + 0.10 + 0.13) / 3
    assert steerability_auc(STEERABLE) == pytest.approx(0.29 / 3)


def test_steerability_mono_counts_adjacent_pairs_moving_the_right_way() -> None:
    assert steerability_mono(STEERABLE) == 1.0
    table = np.array(
        [
            [0.90, 0.92, 0.91, 0.90],  # pair 1 rises: not monotonic
            [0.50, 0.60, 0.55, 0.70],  # pair 2 falls: not monotonic
        ]
    )
    assert steerability_mono(table) == pytest.approx(1 / 3)
    flat = np.full((2, 4), 0.9)  # ties count as monotonic
    assert steerability_mono(flat) == 1.0


def test_steerability_gap_is_the_shrinking_coarse_lead_and_equals_s() -> None:
    # (0.98 − 0.80) − (0.95 − 0.90) = 0.18 − 0.05
    assert steerability_gap(STEERABLE) == pytest.approx(0.13)
    table = np.random.default_rng(0).random((3, 4))
    assert steerability_gap(table) == pytest.approx(steerability(table))


def test_inverted_table_has_negative_steerability() -> None:
    inverted = STEERABLE[:, ::-1]
    assert steerability(inverted) == pytest.approx(-0.13)
    assert steerability_mono(inverted) == 0.0


def test_prefix_ramp_per_level() -> None:
    np.testing.assert_allclose(prefix_ramp(STEERABLE), [-0.03, 0.10])


def test_steerability_rejects_a_table_without_two_levels_and_two_prefixes() -> None:
    with pytest.raises(ValueError, match="at least 2 levels"):
        steerability(np.array([[0.9, 0.8]]))
    with pytest.raises(ValueError, match="at least 2 levels"):
        steerability_auc(np.array([[0.9], [0.8]]))


# --- retrieval ----------------------------------------------------------------------------------


def test_recall_at_1_on_two_dimensional_points() -> None:
    train = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], dtype=np.float32)
    train_labels = np.array([[0, 0], [0, 1], [1, 2]])
    test = np.array([[0.9, 0.2], [0.3, 0.9], [-0.5, 0.6]], dtype=np.float32)
    test_labels = np.array([[0, 0], [0, 1], [1, 2]])
    # 1-d prefix: the sign of x picks train row 0 (x > 0) or 2 (x < 0):
    #   query 0 → row 0 hit/hit; query 1 → row 0 hit/miss; query 2 → row 2 hit/hit.
    # 2-d: query 0 → row 0 hit/hit; query 1 → row 1 hit/hit;
    #   query 2 (−0.64, 0.77) is closest to row 1 (0.77 vs 0.64) → miss/miss.
    table = recall_at_1_table(train, train_labels, test, test_labels, [1, 2])
    np.testing.assert_allclose(table, [[1.0, 2 / 3], [2 / 3, 2 / 3]])


# --- workload -----------------------------------------------------------------------------------


def test_workload_adaptive_and_fixed_curves_at_0_half_and_1() -> None:
    adaptive = workload_curve(STEERABLE, PREFIX_DIMS)
    fixed = workload_curve(STEERABLE, PREFIX_DIMS, coarse_dim=256, fine_dim=256)
    at = [0, 10, 20]
    np.testing.assert_allclose(ALPHAS[at], [0.0, 0.5, 1.0])
    # α · L0@64 + (1 − α) · L1@256 and α · 64 + (1 − α) · 256
    np.testing.assert_allclose(adaptive.accuracy[at], [0.90, 0.94, 0.98])
    np.testing.assert_allclose(adaptive.mean_dim[at], [256, 160, 64])
    # α · L0@256 + (1 − α) · L1@256, always 256 dimensions
    np.testing.assert_allclose(fixed.accuracy[at], [0.90, 0.925, 0.95])
    np.testing.assert_allclose(fixed.mean_dim[at], [256, 256, 256])


def test_workload_rejects_a_dimension_that_is_not_a_prefix() -> None:
    with pytest.raises(ValueError, match="not one of the prefixes"):
        workload_curve(STEERABLE, PREFIX_DIMS, coarse_dim=32)


def test_crossover_alpha() -> None:
    adaptive = workload_curve(STEERABLE, PREFIX_DIMS).accuracy  # 0.90 + 0.08 α
    rival = np.array([[0.96, 0.96, 0.96, 0.96], [0.92, 0.92, 0.92, 0.925]])
    fixed = workload_curve(rival, PREFIX_DIMS, coarse_dim=256).accuracy  # 0.925 + 0.035 α
    # 0.90 + 0.08 α > 0.925 + 0.035 α  ⇔  α > 5/9 ≈ 0.556 → first grid point 0.60
    assert crossover_alpha(adaptive, fixed) == pytest.approx(0.60)
    assert crossover_alpha(adaptive, adaptive - 0.01) == 0.0
    assert crossover_alpha(adaptive, adaptive + 0.01) is None
    # Winning only at small α is no crossover: the adaptive policy loses at α = 1.
    assert crossover_alpha(1.0 - ALPHAS, np.full_like(ALPHAS, 0.5)) is None


# --- statistics ---------------------------------------------------------------------------------


def test_mean_sd_uses_the_sample_sd() -> None:
    mean, sd = mean_sd([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5
    assert sd == pytest.approx(math.sqrt(5 / 3))  # squared deviations 5 over n − 1 = 3
    mean, sd = mean_sd([0.7])
    assert mean == 0.7 and math.isnan(sd)


def test_paired_t_test_and_cohens_d_on_five_pairs() -> None:
    a = [5.0, 7.0, 6.0, 9.0, 8.0]
    b = [4.0, 5.0, 5.0, 6.0, 5.0]
    # diff = 1, 2, 1, 3, 3: mean 2, sd 1 → t = 2 / (1 / √5) = 2√5, d = 2 / 1.
    # Student t with 4 df: P(|T| > 2√5) = 1 − (13/24)·√(10/3).
    result = paired_comparison(a, b)
    assert result.n == 5
    assert result.mean_diff == pytest.approx(2.0)
    assert result.t == pytest.approx(2 * math.sqrt(5))
    assert result.p == pytest.approx(1 - 13 / 24 * math.sqrt(10 / 3))
    assert result.cohens_d == pytest.approx(2.0)
    assert paired_comparison(b, a).t == pytest.approx(-2 * math.sqrt(5))


def test_paired_comparison_with_zero_variance_does_not_crash() -> None:
    shifted = paired_comparison([2.0, 3.0, 4.0], [1.0, 2.0, 3.0])
    assert shifted.t == math.inf and shifted.cohens_d == math.inf and shifted.p == 0.0
    lower = paired_comparison([1.0, 2.0, 3.0], [2.0, 3.0, 4.0])
    assert lower.t == -math.inf and lower.cohens_d == -math.inf
    same = paired_comparison([1.0, 2.0], [1.0, 2.0])
    assert math.isnan(same.t) and math.isnan(same.p) and math.isnan(same.cohens_d)


def test_paired_comparison_rejects_unmatched_samples() -> None:
    with pytest.raises(ValueError, match="equal-length"):
        paired_comparison([1.0, 2.0, 3.0], [1.0])


def test_holm_adjustment_on_a_known_family() -> None:
    # sorted 0.005, 0.01, 0.03, 0.04 × 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 → running max
    adjusted = holm_adjust([0.01, 0.04, 0.03, 0.005])
    np.testing.assert_allclose(adjusted, [0.03, 0.06, 0.06, 0.02])
    np.testing.assert_allclose(holm_adjust([0.6, 0.5]), [1.0, 1.0])


# --- one-call evaluation ------------------------------------------------------------------------


def _toy_embeddings() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Dims 0–1 carry the coarse class, dims 2–3 the fine class within it. Each test point's
    2-d prefix leans towards its sibling fine class, so the short prefix gets the coarse label
    right and the fine label wrong; the full vector gets both right."""
    train = np.array(
        [[1, 0.1, 1, 0], [1, -0.1, 0, 1], [0.1, 1, 1, 0], [-0.1, 1, 0, 1]], dtype=np.float32
    )
    test = np.array(
        [[1, -0.2, 1, 0], [1, 0.2, 0, 1], [-0.2, 1, 1, 0], [0.2, 1, 0, 1]], dtype=np.float32
    )
    labels = np.array([[0, 0], [0, 1], [1, 2], [1, 3]])
    return train, labels, test, labels.copy()


def test_evaluate_embeddings_on_toy_vectors() -> None:
    train, train_labels, test, test_labels = _toy_embeddings()
    evaluation = evaluate_embeddings(train, train_labels, test, test_labels, [2, 4], k=1)
    np.testing.assert_allclose(evaluation.knn_accuracy, [[1.0, 1.0], [0.0, 1.0]])
    np.testing.assert_allclose(evaluation.recall_at_1, [[1.0, 1.0], [0.0, 1.0]])
    assert evaluation.steerability == SteerabilityScores(s=1.0, s_auc=1.0, s_mono=1.0, s_gap=1.0)
    restored = EmbeddingEvaluation.from_dict(json.loads(json.dumps(evaluation.to_dict())))
    assert restored.prefix_dims == [2, 4] and restored.k == 1
    np.testing.assert_array_equal(restored.knn_accuracy, evaluation.knn_accuracy)
    np.testing.assert_array_equal(restored.recall_at_1, evaluation.recall_at_1)
    assert restored.steerability == evaluation.steerability


def test_evaluate_embeddings_rejects_bad_shapes() -> None:
    train, train_labels, test, test_labels = _toy_embeddings()
    with pytest.raises(ValueError, match="labels"):
        evaluate_embeddings(train, train_labels[:, 0], test, test_labels, [2, 4])
    with pytest.raises(ValueError, match="prefix_dims"):
        evaluate_embeddings(train, train_labels, test, test_labels, [2, 8])
    with pytest.raises(ValueError, match="prefix_dims"):
        evaluate_embeddings(train, train_labels, test, test_labels, [4, 2])


# --- report -------------------------------------------------------------------------------------


def _run(method: str, seed: int, table: list[list[float]]) -> RunResult:
    knn = np.array(table)
    evaluation = EmbeddingEvaluation(
        prefix_dims=PREFIX_DIMS,
        k=5,
        knn_accuracy=knn,
        recall_at_1=knn - 0.01,
        steerability=SteerabilityScores.from_table(knn),
    )
    return RunResult(method=method, seed=seed, evaluation=evaluation)


def _two_level_runs() -> list[RunResult]:
    runs = []
    for seed, v5_fine, mrl_fine in ((1, 0.90, 0.92), (2, 0.91, 0.94), (3, 0.92, 0.93)):
        v5 = [[0.985, 0.97, 0.96, 0.95], [0.80, 0.85, 0.88, v5_fine]]
        mrl = [[0.96, 0.96, 0.96, 0.96], [0.92, 0.92, 0.92, mrl_fine]]
        runs += [_run("v5", seed, v5), _run("mrl", seed, mrl)]
    runs.append(_run("raw", 1, [[0.90] * 4, [0.85] * 4]))
    return runs


def test_report_writes_json_markdown_and_pngs_with_the_numbers(tmp_path: Path) -> None:
    files = write_report(_two_level_runs(), tmp_path / "out", ["domain", "intent"])
    markdown = files.markdown.read_text()
    # v5 intent@256 over seeds: 0.90, 0.91, 0.92 → 91.0 ± 1.0 %; recall is 1 point lower.
    assert "| intent | v5 | 80.0 ± 0.0 | 85.0 ± 0.0 | 88.0 ± 0.0 | 91.0 ± 1.0 | +11.0 |" in markdown
    assert "| intent | v5 | 79.0 ± 0.0 | 84.0 ± 0.0 | 87.0 ± 0.0 | 90.0 ± 1.0 | +11.0 |" in markdown
    # S per seed: v5 0.135, 0.145, 0.155; mrl 0.00, 0.02, 0.01; raw 0 (one seed: no SD).
    assert "| v5 | +0.145 ± 0.010 |" in markdown
    assert "| mrl | +0.010 ± 0.010 |" in markdown
    assert "| raw | +0.000 | +0.000 | +1.000 | +0.000 | 0.850 |" in markdown
    # S differences 0.135, 0.125, 0.145: mean 0.135, sd 0.01 → t = 13.5·√3 = 23.38, d = 13.5.
    assert "| v5 | mrl | S | 3 | +0.135 | 23.38 |" in markdown
    assert "| 13.50 |" in markdown
    # All coarse queries: v5 at 64d 0.985, v5 at 256d 0.95, mrl 0.96 at both, raw 0.90.
    assert "| 1.00 | 64 | 98.5 ± 0.0 | 95.0 ± 0.0 | 96.0 ± 0.0 | 96.0 ± 0.0 | 90.0 | 90.0 |" in (
        markdown
    )
    # v5 adaptive 0.91 + 0.075 α against mrl at 256d 0.93 + 0.03 α: crossover above α = 4/9.
    assert "v5 adaptive (64/256d) beats mrl at 256d: for α ≥ 0.45" in markdown

    document = json.loads(files.json.read_text())
    assert document["level_names"] == ["domain", "intent"]
    assert len(document["runs"]) == 7
    assert document["methods"]["v5"]["metrics"]["s"]["mean"] == pytest.approx(0.145)
    assert document["methods"]["raw"]["metrics"]["s"]["sd"] is None
    half = document["workload"]["alphas"].index(0.5)
    assert document["methods"]["v5"]["workload_adaptive"]["mean"][half] == pytest.approx(0.9475)
    assert document["methods"]["v5"]["workload_fixed"]["mean"][half] == pytest.approx(0.93)
    (crossover,) = document["workload"]["crossovers"]
    assert (crossover["adaptive"], crossover["fixed"]) == ("v5", "mrl")
    assert crossover["alpha"] == pytest.approx(0.45)
    (comparison,) = [c for c in document["comparisons"] if c["metric"] == "s"]
    assert comparison["t"] == pytest.approx(13.5 * math.sqrt(3))
    assert comparison["p_holm"] == pytest.approx(comparison["p"])

    for plot in (files.accuracy_plot, files.workload_plot):
        assert plot.read_bytes()[:8] == PNG_MAGIC


def test_compare_pairs_by_shared_seeds_and_holm_adjusts_across_pairs() -> None:
    runs = [run for run in _two_level_runs() if (run.method, run.seed) != ("mrl", 3)]
    runs += [
        _run("uhmt", seed, [[0.95] * 4, [0.90, 0.90, 0.90, 0.90 + gain]])
        for seed, gain in ((1, 0.00), (2, 0.04), (3, 0.01))
    ]
    pairs = [("v5", "mrl"), ("v5", "uhmt"), ("v5", "raw"), ("v5", "absent")]
    rows = {(c.a, c.b): c for c in compare(runs, pairs) if c.metric == "s"}
    assert set(rows) == {("v5", "mrl"), ("v5", "uhmt")}  # raw has one seed, absent none
    mrl, uhmt = rows["v5", "mrl"], rows["v5", "uhmt"]
    # Seeds 1, 2 only: S differences 0.135, 0.125 → mean 0.13, sd 0.01/√2 → t = 26 with 1 df,
    # whose two-sided p is 1 − (2/π)·arctan(26).
    assert mrl.result.n == 2
    assert mrl.result.t == pytest.approx(26.0)
    assert mrl.result.p == pytest.approx(1 - 2 / math.pi * math.atan(26.0))
    assert uhmt.result.n == 3
    smaller, larger = sorted((mrl, uhmt), key=lambda c: c.result.p)
    assert smaller.p_holm == pytest.approx(2 * smaller.result.p)
    assert larger.p_holm == pytest.approx(max(larger.result.p, 2 * smaller.result.p))


def test_report_handles_three_levels_and_any_method_names(tmp_path: Path) -> None:
    runs = [
        _run("ablation", seed, [[0.99] * 4, [0.98] * 4, [0.90, 0.92, 0.93, 0.93 + seed / 100]])
        for seed in (1, 2)
    ]
    files = write_report(runs, tmp_path, ["super", "domain", "intent"], pairs=[])
    markdown = files.markdown.read_text()
    assert "| domain | ablation | 98.0 ± 0.0 |" in markdown
    assert "## Steerability (super vs intent, 64d vs 256d)" in markdown
    assert "No pair of methods shares two or more seeds." in markdown
    assert files.accuracy_plot.read_bytes()[:8] == PNG_MAGIC


def test_report_lists_labels_by_their_paths(tmp_path: Path) -> None:
    rows = [("t1", ("LOC", "city")), ("t2", ("LOC", "other")), ("t3", ("NUM", "other"))]
    hierarchy = build_hierarchy("d", ("domain", "intent"), rows, ["train"] * 3)["train"].hierarchy
    files = write_report(_two_level_runs(), tmp_path, ["domain", "intent"], hierarchy=hierarchy)
    assert json.loads(files.json.read_text())["labels"] == [
        {"level": "domain", "labels": ["LOC", "NUM"]},
        {"level": "intent", "labels": ["LOC / city", "LOC / other", "NUM / other"]},
    ]
    markdown = files.markdown.read_text()
    assert "## Labels (each shown as its path from the root, joined by ' / ')" in markdown
    assert "- intent (3): LOC / city, LOC / other, NUM / other" in markdown
    with pytest.raises(ValueError, match="the hierarchy's levels"):
        write_report(_two_level_runs(), tmp_path, ["coarse", "fine"], hierarchy=hierarchy)
    assert "labels" not in json.loads(
        write_report(_two_level_runs(), tmp_path, ["domain", "intent"]).json.read_text()
    )


def test_report_rejects_mismatched_level_names_and_duplicate_runs(tmp_path: Path) -> None:
    runs = _two_level_runs()
    with pytest.raises(ValueError, match="level names"):
        write_report(runs, tmp_path, ["a", "b", "c"])
    with pytest.raises(ValueError, match="two runs of v5 with seed 1"):
        write_report([*runs, runs[0]], tmp_path, ["a", "b"])
