"""Smoke runs of the low-dimension (MIC/MIPIC vs MRL) and SFS retrieval benchmarks: their files
exist and their numbers are sane scores (no timings)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks import low_dim
from tests.benchmarks.smoke import run_smoke
from training.finetune import FinetuneConfig


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


@pytest.mark.slow
def test_low_dim_workers_and_merge(tmp_path: Path) -> None:
    """Runs trained in worker processes score exactly as the same runs trained one after the
    other; --merge joins another invocation's runs of the same setting and trains none of them
    again, and refuses a missing file or another setting."""
    options = ["--task-loss", "simcse", "--corpus-size", "60", "--dims", "16,384",
               "--eval-datasets", "banking77", "--objectives", "mrl,mic", "--epochs", "1"]
    _, parallel = run_smoke("low_dim", tmp_path / "a", *options, "--seeds", "1",
                            "--workers", "2")
    paths, sequential = run_smoke("low_dim", tmp_path / "b", *options, "--seeds", "1,2")
    assert parallel["machine"]["workers"] == 2 and parallel["machine"]["device"] == "cpu"
    assert sorted((r["variant"], r["seed"]) for r in parallel["runs"]) == [
        ("mic", 1), ("mrl", 1), ("raw", 0)
    ]
    for run in parallel["runs"]:  # the same numbers, whichever process trained them
        twin = next(r for r in sequential["runs"]
                    if (r["variant"], r["seed"]) == (run["variant"], run["seed"]))
        assert run["scores"] == twin["scores"]
        assert run.get("machine", {}).get("device") == twin.get("machine", {}).get("device")
    _, merged = run_smoke("low_dim", tmp_path / "a", *options, "--seeds", "1,2",
                          "--resume", "yes", "--merge", str(paths[0]))
    assert merged["runs"][1:3] == parallel["runs"][1:]  # its own runs first, as they were
    assert merged["runs"][3:] == sequential["runs"][3:]  # then the other file's seed 2, as made
    assert merged["summary"]["mic"]["banking77"]["vs_mrl"]["lr_macro_f1"]["seeds"] == [1, 2]
    with pytest.raises(SystemExit, match="no such results file"):
        run_smoke("low_dim", tmp_path / "a", *options, "--merge", str(tmp_path / "none.json"))
    with pytest.raises(SystemExit, match="another setting"):
        run_smoke("low_dim", tmp_path / "c", *options, "--epochs", "2", "--merge", str(paths[0]))


def test_paired_differences_name_mixed_devices() -> None:
    """A paired difference says which seeds' two runs trained on different devices, and the
    target text where its pairs trained."""
    def run(variant: str, seed: int, f1: float, device: str | None) -> dict:
        entry = {"variant": variant, "seed": seed, "scores": {"b": {"f1": [f1]}}}
        return entry | ({"machine": {"device": device}} if device else {})

    gpu = "cuda (NVIDIA H200)"
    runs = [run("mrl", 1, 0.40, None), run("mic", 1, 0.50, None),  # recorded before: the CPU
            run("mrl", 2, 0.42, gpu), run("mic", 2, 0.48, gpu), run("mic-sir", 1, 0.44, gpu)]
    gain = low_dim.paired(runs, "mic", "b", "f1")
    assert gain["seeds"] == [1, 2] and gain["mixed_devices"] == []
    assert gain["devices"] == ["cpu", gpu]
    assert gain["mean"] == pytest.approx([8.0])
    assert low_dim._devices_note(gain) == f"; seed 1 on cpu, seed 2 on {gpu}"
    ablation = low_dim.paired(runs, "mic-sir", "b", "f1", reference="mic")
    assert ablation["reference"] == "mic" and ablation["mixed_devices"] == [1]
    assert ablation["per_seed"][0] == pytest.approx([-6.0]) and ablation["p_value"] == [None]
    assert low_dim.full_objective("mic-sir") == "mic" and low_dim.full_objective("mic") is None


def test_a_reading_trained_at_three_seeds_is_held_to_the_objectives_target() -> None:
    """A reading of MIPIC's loss with three seeds gets a target row of its own; one with fewer
    seeds, and an ablation, get none."""
    def gain(mean: float, seeds: int) -> dict:
        result = {"seeds": list(range(seeds)), "devices": ["cpu"] * seeds, "mean": [mean],
                  "p_value": [0.2]}
        return {"banking77": {"vs_mrl": {"lr_macro_f1": result}}}

    payload = {
        "task_loss": "simcse", "eval_datasets": ["banking77"], "dims": [16],
        "summary": {"mic": gain(9.0, 3), "mipic": gain(-4.0, 3),
                    "mipic@cka_weight=0.03": gain(6.0, 3),
                    "mipic@attention_weight=0.1": gain(7.0, 1), "mipic-sia": gain(8.0, 3)},
    }
    targets = {row["target"].split(" ≥")[0]: row for row in low_dim._targets(payload)}
    assert list(targets) == ["MIC", "MIPIC", "MIPIC (mipic@cka_weight=0.03)"]
    assert [row["met"] for row in targets.values()] == [True, False, True]
    assert targets["MIPIC (mipic@cka_weight=0.03)"]["reached"].startswith("+6.00 points over 3")


def test_variants_name_their_objective_left_out_components_and_settings() -> None:
    reading = "mipic@attention_temperature=0.05"
    assert low_dim.parse_variant(reading) == ("mipic", (), (("attention_temperature", 0.05),))
    assert low_dim.parse_variant("mic-scr") == ("mic", ("scr",), ())
    assert low_dim.full_objective(reading) == "mipic"
    config = low_dim.variant_config(FinetuneConfig(), reading, 7)
    assert (config.objective, config.seed, config.without) == ("mipic", 7, ())
    assert config.options == (("attention_temperature", 0.05),)
    low_dim._check(replace(low_dim.Settings(), ablations=(reading, "mipic-sia")))
    for bad, message in [
        ("mipic@attention_temperature", "is not NAME=NUMBER"),
        ("mipic@attention_temperature=warm", "is not NAME=NUMBER"),
        ("mipic@tau=1", "option 'tau'"),
        ("mic@attention_temperature=1", "mic has no settings"),
        ("mipic@attention_temperature=-1", "positive number"),
        ("mic-xyz", "--without xyz"),
        ("mipic", "is a full objective"),
    ]:
        with pytest.raises(SystemExit, match=message):
            low_dim._check(replace(low_dim.Settings(), ablations=(bad,)))


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
