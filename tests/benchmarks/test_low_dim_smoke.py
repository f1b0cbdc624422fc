"""Smoke runs of the low-dimension (MIC/MIPIC vs MRL) and SFS retrieval benchmarks: their files
exist and their numbers are sane scores (no timings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmarks.smoke import run_smoke


@pytest.mark.slow
def test_low_dim_smoke(tmp_path: Path) -> None:
    run_smoke("low_dim", tmp_path, "--dims", "16,64,384")
    name = "low_dim_banking77_smoke"
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [f"{name}.{suffix}" for suffix in ("json", "md", "png")]
    report = json.loads((tmp_path / f"{name}.json").read_text(encoding="utf-8"))
    assert [r["variant"] for r in report["runs"]] == ["raw", "mrl", "mic", "mipic"]
    _check_scores(report, ["banking77"], 3)
    assert set(report["summary"]) == {"raw", "mrl", "mic", "mipic"}
    assert report["targets"] == []  # the targets are on the unsupervised setting
    assert "Paired difference to matched MRL" in (tmp_path / f"{name}.md").read_text("utf-8")


@pytest.mark.slow
def test_low_dim_unsupervised_smoke_resumes(tmp_path: Path) -> None:
    """The papers' setting: SimCSE on the unlabelled mix, scored on two datasets, one ablation;
    a second run with --resume keeps the first one's runs and adds the new seed's."""
    options = ["--task-loss", "simcse", "--corpus-size", "60", "--dims", "16,384",
               "--eval-datasets", "banking77,clinc150", "--objectives", "mrl,mic",
               "--ablations", "mic-sir", "--epochs", "1",
               "--checkpoint-dir", str(tmp_path / "checkpoints")]
    _, first = run_smoke("low_dim", tmp_path, *options, "--seeds", "1")
    assert first["setting"]["corpus_per_source"] == {"banking77": 20, "clinc150": 20,
                                                     "wikipedia": 20}
    assert first["setting"]["steps"] == 60 // 8
    assert [(r["variant"], r["seed"]) for r in first["runs"]] == [
        ("raw", 0), ("mrl", 1), ("mic", 1), ("mic-sir", 42)
    ]
    _check_scores(first, ["banking77", "clinc150"], 2)
    for trained in first["runs"][1:]:  # each run's own date, CPU and load, start and end
        machine = trained["machine"]
        assert machine["cpu_model"] == first["machine"]["cpu_model"]
        assert machine["date_utc"] >= first["machine"]["date_utc"]
        assert len(machine["load_average_1_5_15_min_at_start"]) == 3
        assert len(machine["load_average_1_5_15_min_at_end"]) == 3
        (session,) = trained["sessions"]  # none resumed: one session, all the steps
        assert (session["first_step"], session["last_step"]) == (1, first["setting"]["steps"])
        assert trained["train_seconds"] == session["seconds"] > 0
    assert not list((tmp_path / "checkpoints").glob("*"))  # each removed when its run completed
    target = first["targets"][0]
    assert target["met"] is False and "over 1 seed(s)" in target["reached"]
    _, second = run_smoke("low_dim", tmp_path, *options, "--seeds", "1,2", "--resume", "yes")
    kept = [r for r in second["runs"] if r["seed"] == 1]
    assert kept == [r for r in first["runs"] if r["seed"] == 1]  # their machine records too
    assert second["machine"]["date_utc"] > max(r["machine"]["date_utc"] for r in kept)
    assert [(r["variant"], r["seed"]) for r in second["runs"]][-2:] == [("mrl", 2), ("mic", 2)]
    paired = second["summary"]["mic"]["banking77"]["vs_mrl"]["lr_macro_f1"]
    assert paired["seeds"] == [1, 2] and len(paired["p_value"]) == 2
    with pytest.raises(SystemExit, match="another setting"):
        run_smoke("low_dim", tmp_path, *options, "--epochs", "2", "--resume", "yes")


def _check_scores(report: dict, datasets: list[str], dims: int) -> None:
    for run in report["runs"]:
        for dataset in datasets:
            scores = run["scores"][dataset]
            assert all(len(scores[metric]) == dims for metric in scores)
            assert all(0 <= v <= 1 for values in scores.values() for v in values)


@pytest.mark.slow
def test_sfs_retrieval_smoke(tmp_path: Path) -> None:
    run_smoke("sfs_retrieval", tmp_path, "--fragments", "256,64,16")
    report = json.loads((tmp_path / "sfs_retrieval_clinc150_smoke.json").read_text("utf-8"))
    assert set(report["mean"]) == {"256", "64", "16"}
    for by_scoring in report["mean"].values():
        assert set(by_scoring) == {"cosine", "sfs-64", "sfs-16"}
        for metrics in by_scoring.values():
            assert 0 <= metrics["recall@1"] <= metrics["recall@10"] <= 1
            assert metrics["recall@1"] <= metrics["mrr@10"] <= metrics["recall@10"]
