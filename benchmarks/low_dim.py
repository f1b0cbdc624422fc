"""Low-dimension evaluation of MIC and MIPIC against a matched MRL (MIC/MIPIC papers, Table 1).

Each objective trains the same encoder on the same texts with the same steps, batches, unfrozen
layers and learning rates (:class:`training.finetune.FinetuneConfig`, only ``objective`` and
the ablated components differ). Every trained encoder is then scored at each nested dimension
by logistic regression on frozen features (:mod:`training.evaluation.linear_probe`: macro F1,
the papers' number, and accuracy) and by 5-NN accuracy (:mod:`training.evaluation.knn`). The
untrained encoder's own prefixes are the ``raw`` row.

Two settings (``--task-loss``):

- ``supervised`` (ours): training on ``--max-train`` labelled texts of ``--dataset``, with the
  label-contrastive task loss; scored on that dataset;
- ``simcse``: the papers' own setting. Unsupervised SimCSE (:mod:`training.objectives.simcse`)
  on the unlabelled mix of ``--corpus-size`` distinct sentences
  (:mod:`training.data.unlabelled`), for ``--epochs`` passes, scored on every
  ``--eval-datasets`` (logistic regression fitted on ``--max-train`` of its training texts).

``--ablations mic-scr,mipic-pic`` adds variants with one component left out, trained at
``--ablation-seeds``; a variant may instead give its loss a setting other than the default
reading of the paper (``mipic@attention_temperature=0.05``, :data:`training.finetune.SETTABLE`),
a screen of another reading. Each variant is compared with MRL and with its full objective.
With ``--resume yes`` the runs already in the results file (same setting) are kept and only
the missing ones run. The file is rewritten after every run, so an interrupted benchmark keeps
what it measured; with ``--checkpoint-dir`` a run interrupted
part-way also resumes from its last checkpoint (:mod:`training.finetune_checkpoint`). Such a
benchmark spans sessions and machines, so each trained run keeps its own date, CPU model,
device (``cpu`` or ``cuda (GPU name)``) and load average at its start and end (``machine`` in its
entry) beside the file's machine section, which describes the last invocation only, and its
sessions (``sessions``: when each invocation trained which steps, for how long;
``train_seconds`` is their sum).

``--workers N`` trains N runs at once, each in a spawned process of its own: on a GPU, where one
run leaves most of it idle, issue 20's 3,750-step runs took 191–443 s each, five at a time on an
H200, against 53–83 min each on 2 CPU cores. ``--merge a.json,b.json`` adds the runs of other
results files of the same setting, made on other machines, and trains none of them again; the
paired tables name the seeds whose two runs trained on different devices (a CPU and a GPU draw
different dropout masks from one seed). ``benchmarks/gpu/`` runs the protocol on a lent GPU.

    python -m benchmarks low_dim                        # Banking77, 3,000 training texts
    python -m benchmarks low_dim --task-loss simcse --epochs 5 --seeds 42,123,456 \\
        --eval-datasets banking77,clinc150 --ablations mic-scr,mic-sir,mipic-sia,mipic-pic \\
        --threads 2 --resume yes --checkpoint-dir runs/low_dim_checkpoints \\
        --out benchmarks/results/low_dim_unsupervised  # CPU-hours: in the background
    python -m benchmarks low_dim --smoke --out /tmp/x   # seconds; what CI runs

Writes ``low_dim_<dataset>.{json,md,png}`` (``low_dim_simcse`` for the unsupervised setting;
``_smoke`` in smoke runs) under ``--out``.
"""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure
from scipy import stats

from benchmarks.harness.machine import load_average, run_stamp
from benchmarks.harness.markdown import bullet_sections, markdown_table, targets_table
from benchmarks.harness.runner import Progress, option, paths, yes_no
from benchmarks.harness.runner import results_name as file_stem
from training.data.dataset import DatasetSplits
from training.data.registry import data_dir, load_dataset
from training.data.unlabelled import PAPER_CORPUS_SIZE, unlabelled_corpus
from training.errors import FractalError
from training.evaluation.knn import knn_accuracy_table
from training.evaluation.linear_probe import logistic_regression_scores
from training.finetune import FinetuneConfig, embed_texts, finetune
from training.finetune_checkpoint import FinetuneCheckpoint
from training.frozen_encoder import FrozenEncoder
from training.objectives.simcse import TASK_LOSSES

# Banking77 LR F1 (×100) from the papers' Table 1 at 16/32/64/128/256 dims (their 512/768 rows
# have no MiniLM counterpart): backbone → method → scores.
PAPER_BANKING77 = {
    "TinyBERT-6L": {
        "MRL (MIC paper)": [40.64, 62.59, 73.58, 80.31, 85.04],
        "MIC": [44.1, 65.7, 77.52, 83.49, 86.52],
        "MRL (MIPIC paper)": [40.64, 63.48, 74.89, 81.97, 85.51],
        "MIPIC": [48.93, 65.68, 74.88, 82.43, 86.78],
    },
    "BERT-base": {
        "MRL": [46.39, 64.9, 76.84, 83.49, 86.45],
        "MIC": [59.45, 75.71, 83.05, 86.57, 88.11],
        "MIPIC": [54.65, 71.67, 79.23, 86.24, 87.64],
    },
}
PAPER_DIMS = [16, 32, 64, 128, 256]
# Config fields that differ per run (or do not apply), left out of the shared setting block.
PER_RUN_KEYS = ("objective", "fragment_dim", "seed", "without", "options")
# Setting entries that only list which runs to make: --resume may change them.
RUN_LIST_KEYS = ("seeds", "objectives", "ablations", "ablation_seeds")
METRICS = {
    "lr_macro_f1": "Logistic-regression macro F1",
    "lr_accuracy": "Logistic-regression accuracy",
    "knn_accuracy": "5-NN accuracy",
}
TARGET_GAIN_POINTS = 5.0
"""MIC and MIPIC each ≥ MRL + 5 points of Banking77 F1 at 16-d (the papers: +13 and +8)."""
TARGET_SEEDS = 3


@dataclass(frozen=True)
class Settings:
    """Every parameter of a run."""

    dataset: str = option("banking77", "dataset trained on (supervised) and scored")
    task_loss: str = option("supervised", "supervised (labelled --dataset) or simcse (unlabelled)")
    eval_datasets: tuple[str, ...] = option((), "datasets scored (default: --dataset)")
    corpus_size: int = option(PAPER_CORPUS_SIZE, "simcse: distinct texts of the unlabelled mix")
    max_train: int = option(3000, "labelled training texts (the papers sample 3,000)")
    max_test: int | None = option(None, "test texts (default: the whole test split)")
    objectives: tuple[str, ...] = option(("mrl", "mic", "mipic"), "comma-separated objectives")
    seeds: tuple[int, ...] = option((42,), "comma-separated seeds")
    ablations: tuple[str, ...] = option(
        (), "variants: a component left out (mic-scr,…) or a loss setting given (mipic@NAME=X)"
    )
    ablation_seeds: tuple[int, ...] = option((42,), "seeds of the ablation variants")
    dims: tuple[int, ...] = option((16, 32, 64, 128, 256, 384), "comma-separated prefixes")
    steps: int = option(300, "fine-tuning steps (when --epochs is not given)")
    epochs: int | None = option(None, "passes over the training texts (sets the steps)")
    batch_size: int = option(32, "batch size")
    unfreeze_layers: int = option(6, "top encoder layers trained")
    max_tokens: int = option(64, "tokens per text")
    threads: int = option(1, "torch threads (per worker)")
    workers: int = option(1, "runs trained at once, each in a process of its own (a GPU or "
                             "many cores)")
    resume: bool = option(False, "keep the finished runs of the results file", parse=yes_no)
    checkpoint_dir: Path | None = option(
        None, "folder for mid-run checkpoints: a run stopped part-way resumes from its last one"
    )
    merge: tuple[Path, ...] = option(
        (), "comma-separated results files of the same setting whose runs join this one's "
        "(runs made on another machine, a GPU's say)", parse=paths,
    )


SMOKE = Settings(max_train=120, max_test=40, steps=2, batch_size=8, unfreeze_layers=1)


def results_name(settings: Settings) -> str:
    if settings.task_loss == "simcse":
        return "low_dim_simcse"
    return f"low_dim_{Path(settings.dataset).name}"


def parse_variant(variant: str) -> tuple[str, tuple[str, ...], tuple[tuple[str, float], ...]]:
    """A variant's objective, the components it leaves out and the loss settings it gives:
    ``mic`` → MIC; ``mic-scr`` → MIC without SCR (components after the dashes);
    ``mipic@attention_temperature=0.05`` → MIPIC with that setting (a reading). A setting that
    is not a number is a :class:`ValueError`."""
    head, *settings = variant.split("@")
    objective, *without = head.split("-")
    options = []
    for setting in settings:
        name, equals, value = setting.partition("=")
        try:
            options.append((name, float(value)))
        except ValueError:
            raise ValueError(f"variant {variant!r}: {setting!r} is not NAME=NUMBER") from None
        if not equals:
            raise ValueError(f"variant {variant!r}: {setting!r} is not NAME=NUMBER")
    return objective, tuple(without), tuple(options)


def variant_config(base: FinetuneConfig, variant: str, seed: int) -> FinetuneConfig:
    """The training run of ``variant`` (:func:`parse_variant`) at ``seed``."""
    objective, without, options = parse_variant(variant)
    return replace(base, objective=objective, seed=seed, without=without, options=options)


def _scores(train_vectors, train_labels, test_vectors, test_labels, dims) -> dict:
    probe = logistic_regression_scores(train_vectors, train_labels, test_vectors, test_labels, dims)
    knn = knn_accuracy_table(
        train_vectors, train_labels[:, None], test_vectors, test_labels[:, None], dims
    )[0]
    return {
        "lr_macro_f1": probe["macro_f1"].tolist(),
        "lr_accuracy": probe["accuracy"].tolist(),
        "knn_accuracy": knn.tolist(),
    }


def _check(settings: Settings) -> None:
    for source in settings.merge:
        if not source.is_file():
            raise SystemExit(f"error: --merge {source}: no such results file")
    if settings.workers < 1:
        raise SystemExit("error: --workers must be at least 1")
    if settings.task_loss not in TASK_LOSSES:
        raise SystemExit(f"error: --task-loss must be one of {', '.join(TASK_LOSSES)}")
    for variant in settings.ablations:
        try:
            config = variant_config(FinetuneConfig(), variant, 0)
            config.validate()
        except (ValueError, FractalError) as exc:
            raise SystemExit(f"error: variant {variant!r}: {exc}") from None
        if not (config.without or config.options):
            raise SystemExit(
                f"error: variant {variant!r} is a full objective: expected one with a component "
                "left out (mic-scr, mic-sir, mipic-sia, mipic-pic) or a setting given "
                "(mipic@attention_temperature=0.05)"
            )


def _device(run: dict) -> str:
    """What a trained run trained on (runs recorded before the device was: the CPU, since the
    trainer could not train on a GPU then)."""
    return run.get("machine", {}).get("device", "cpu")


def paired(runs: list[dict], variant: str, dataset: str, metric: str,
           reference: str = "mrl") -> dict | None:
    """``variant`` − ``reference`` per seed both ran (points, per dim), their mean, and a paired
    t-test's p-value per dim (two-sided; ``None`` under two seeds). ``mixed_devices`` lists the
    seeds whose two runs trained on different devices (a CPU and a GPU draw different dropout
    masks from the same seed, so such a pair differs by a seed-like amount beside the method)."""
    by_seed = {r["seed"]: r for r in runs if r["variant"] == reference}
    pairs = [(r, by_seed[r["seed"]]) for r in runs
             if r["variant"] == variant and r["seed"] in by_seed]
    if not pairs:
        return None
    diffs = np.stack([
        np.subtract(mine["scores"][dataset][metric], theirs["scores"][dataset][metric]) * 100
        for mine, theirs in pairs
    ])
    p_values = [None] * diffs.shape[1]
    if len(pairs) >= 2:
        p_values = [
            None if np.allclose(column, column[0]) else float(stats.ttest_1samp(column, 0).pvalue)
            for column in diffs.T
        ]
    return {
        "reference": reference,
        "seeds": [mine["seed"] for mine, _ in pairs],
        "devices": [_device(mine) if _device(mine) == _device(theirs)
                    else f"{_device(theirs)} / {_device(mine)}" for mine, theirs in pairs],
        "mixed_devices": [mine["seed"] for mine, theirs in pairs
                          if _device(mine) != _device(theirs)],
        "per_seed": diffs.tolist(),
        "mean": diffs.mean(0).tolist(),
        "p_value": p_values,
    }


def full_objective(variant: str) -> str | None:
    """The full objective a variant departs from (``mic-scr`` and
    ``mipic@attention_temperature=0.05`` → ``mic`` and ``mipic``); None for a full objective."""
    objective, without, options = parse_variant(variant)
    return objective if without or options else None


def _summarise(runs: list[dict], datasets: list[str]) -> dict:
    summary: dict[str, dict] = {}
    for variant in dict.fromkeys(r["variant"] for r in runs):
        mine = [r for r in runs if r["variant"] == variant]
        full = full_objective(variant)
        summary[variant] = {
            "seeds": [r["seed"] for r in mine],
            **{
                dataset: {
                    metric: np.mean([r["scores"][dataset][metric] for r in mine], axis=0).tolist()
                    for metric in METRICS
                }
                | {
                    "vs_mrl": {
                        metric: paired(runs, variant, dataset, metric)
                        for metric in METRICS
                        if variant not in ("mrl", "raw")
                    },
                    "vs_full": {
                        metric: paired(runs, variant, dataset, metric, reference=full)
                        for metric in METRICS
                        if full is not None
                    },
                }
                for dataset in datasets
            },
        }
    return summary


def _targets(payload: dict) -> list[dict]:
    """The targets, on the unsupervised setting's Banking77 16-d F1: MIC's and MIPIC's, and
    each reading of their losses (``mipic@cka_weight=…``) trained at :data:`TARGET_SEEDS` seeds
    or more, held to the same target."""
    if payload["task_loss"] != "simcse" or "banking77" not in payload["eval_datasets"]:
        return []
    column = payload["dims"].index(16) if 16 in payload["dims"] else None
    summary = payload["summary"]

    def gain(variant: str) -> dict | None:
        return summary.get(variant, {}).get("banking77", {}).get("vs_mrl", {}).get("lr_macro_f1")

    def is_reading(variant: str) -> bool:
        objective, without, options = parse_variant(variant)
        return objective in ("mic", "mipic") and bool(options) and not without

    readings = [
        variant
        for variant in summary
        if is_reading(variant) and len((gain(variant) or {}).get("seeds", ())) >= TARGET_SEEDS
    ]
    targets = []
    for variant in ("mic", "mipic", *readings):
        result = gain(variant)
        objective = parse_variant(variant)[0]
        name = (
            f"{objective.upper()}{'' if variant == objective else f' ({variant})'} ≥ MRL + "
            f"{TARGET_GAIN_POINTS:g} points of Banking77 LR macro F1 at 16-d, mean of "
            f"{TARGET_SEEDS} seeds (unsupervised SimCSE setting)"
        )
        if result is None or column is None:
            targets.append({"target": name, "reached": "not run", "met": False})
            continue
        seeds = len(result["seeds"])
        mean = result["mean"][column]
        p = result["p_value"][column]
        reached = f"{mean:+.2f} points over {seeds} seed(s)" + (
            f", paired t-test p = {p:.3f}" if p is not None else ""
        ) + _devices_note(result)
        met = seeds >= TARGET_SEEDS and mean >= TARGET_GAIN_POINTS
        targets.append({"target": name, "reached": reached, "met": met})
    return targets


def _devices_note(result: dict) -> str:
    """Where the pairs of a paired difference trained, when not all on one device:
    ``; seeds 42, 123 on cpu, seed 456 on cuda (NVIDIA H200)``."""
    by_device: dict[str, list[int]] = {}
    for seed, device in zip(result["seeds"], result["devices"], strict=True):
        by_device.setdefault(device, []).append(seed)
    if len(by_device) < 2:
        return ""
    return "; " + ", ".join(
        f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))} on {device}"
        for device, seeds in by_device.items()
    )


def _dataset_section(payload: dict, dataset: str) -> list[str]:
    dims = payload["dims"]
    lines = [f"## {dataset}", ""]
    summary = payload["summary"]
    for metric, title in METRICS.items():
        rows = [
            [variant, len(s["seeds"])] + [f"{v * 100:.2f}" for v in s[dataset][metric]]
            for variant, s in summary.items()
        ]
        lines += [f"### {title} (×100, mean over seeds)", ""]
        lines += [markdown_table(["variant", "seeds", *map(str, dims)], rows), ""]
        for key, text in PAIRED_TABLES.items():
            rows = [_paired_row(variant, result)
                    for variant, s in summary.items()
                    if (result := s[dataset][key].get(metric)) is not None]
            if rows:
                lines += [text, "", markdown_table(
                    ["variant", "against", "seeds", *map(str, dims)], rows), ""]
    return lines


PAIRED_TABLES = {
    "vs_mrl": "Paired difference to matched MRL (points, mean over the seeds both ran; two-sided "
              "one-sample t-test on the per-seed differences):",
    "vs_full": "Variants: the variant − its full objective (points, same seeds; for an "
               "ablation, a negative number is what the component left out adds):",
}


def _paired_row(variant: str, result: dict) -> list:
    """One row of a paired-difference table; seeds whose two runs trained on different devices
    are named in the seeds cell."""
    p_values = ["" if p is None else f" (p {p:.3f})" for p in result["p_value"]]
    mixed = result["mixed_devices"]
    seeds = f"{len(result['seeds'])}" + (
        f" (seed {', '.join(map(str, mixed))}: runs on different devices)" if mixed else ""
    )
    return [variant, result["reference"], seeds] + [
        f"{d:+.2f}{p}" for d, p in zip(result["mean"], p_values, strict=True)
    ]


def markdown(payload: dict) -> str:
    dims = payload["dims"]
    setting = "unsupervised SimCSE" if payload["task_loss"] == "simcse" else "supervised"
    lines = [f"# Low-dimension evaluation, {setting} setting", ""]
    if payload.get("targets"):
        lines += ["## Targets", "", targets_table(payload["targets"]), ""]
    for dataset in payload["eval_datasets"]:
        lines += _dataset_section(payload, dataset)
    if "banking77" in payload["eval_datasets"]:
        rows = [
            [f"{backbone}: {method}", *(f"{v:.2f}" for v in scores)]
            for backbone, methods in PAPER_BANKING77.items()
            for method, scores in methods.items()
        ]
        lines += [
            "## The papers' Banking77 LR F1 (their unsupervised setting)",
            "",
            markdown_table(["row", *map(str, PAPER_DIMS)], rows),
            "",
        ]
    lines += ["## Per run (LR macro F1 ×100)", ""]
    headers = ["variant", "seed", "train s", "started (UTC)",
               "load 1 min start → end (last session)", "trained on"] + [
        f"{dataset} F1@{d}" for dataset in payload["eval_datasets"] for d in (dims[0], dims[-1])
    ]
    rows = [
        [r["variant"], r["seed"], _seconds(r["train_seconds"]), *_run_machine_cells(r)]
        + [
            f"{r['scores'][dataset]['lr_macro_f1'][column] * 100:.2f}"
            for dataset in payload["eval_datasets"]
            for column in (0, -1)
        ]
        for r in payload["runs"]
    ]
    lines += [markdown_table(headers, rows), ""]
    lines += bullet_sections({
        "Setting": payload["setting"],
        "Machine (this invocation; each trained run's own date and load are in its row above)":
            payload["machine"],
    })
    return "\n".join(lines)


def _seconds(seconds: float | None) -> str:
    return "not recorded" if seconds is None else f"{seconds:.0f}"


def _minute(date_utc: str | None) -> str:
    return "not recorded" if date_utc is None else date_utc[:16].replace("T", " ")


def _run_machine_cells(run: dict) -> list[str]:
    """The date, load and device a trained run recorded of itself (the raw row is not trained):
    its start, each resumption from a checkpoint, the load at the start and end of its last
    session, and what it trained on."""
    machine = run.get("machine")
    if machine is None:
        return ["—"] * 3 if run["variant"] == "raw" else ["not recorded"] * 3
    load = (f"{machine['load_average_1_5_15_min_at_start'][0]:.2f} → "
            f"{machine['load_average_1_5_15_min_at_end'][0]:.2f}")
    first, *resumed = run.get("sessions") or [{"started_utc": machine["date_utc"]}]
    started = "; ".join([_minute(first["started_utc"]), *(
        f"resumed {_minute(session['started_utc'])} at step {session['first_step']}"
        for session in resumed
    )])
    return [started, load, _device(run)]


def plot(payload: dict, path: Path) -> None:
    datasets = payload["eval_datasets"]
    figure = Figure(figsize=(7.5 * len(datasets), 4))
    for axis, dataset in zip(np.atleast_1d(figure.subplots(1, len(datasets))), datasets,
                             strict=True):
        colours = {}
        for variant, summary in payload["summary"].items():
            (line,) = axis.plot(payload["dims"], np.asarray(summary[dataset]["lr_macro_f1"]) * 100,
                                marker="o", label=variant,
                                linestyle=":" if full_objective(variant) else "-")
            colours[variant] = line.get_color()
        if dataset == "banking77" and payload["task_loss"] == "simcse":  # the papers' setting
            paper = payload["paper_banking77_lr_f1"]
            for method, scores in paper["BERT-base"].items():
                axis.plot(paper["dims"], scores, linestyle="--", marker=".", alpha=0.6,
                          color=colours.get(method.lower()), label=f"paper, BERT-base {method}")
        axis.set_xscale("log", base=2)
        axis.set_xticks(payload["dims"], [str(d) for d in payload["dims"]])
        axis.set_xlabel("prefix dimension")
        axis.set_ylabel("LR macro F1 (%)")
        axis.set_title(f"{dataset}: nested prefixes ({payload['task_loss']})")
        axis.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def _finished_runs(settings: Settings, progress: Progress, setting: dict) -> list[dict]:
    """The runs already made: the results file's when ``--resume yes``, then each ``--merge``
    file's that are not among them yet (a run made twice keeps its first). Every file must hold
    this invocation's setting; the untrained ``raw`` row is always scored again."""
    path = progress.out / f"{file_stem(results_name(settings), progress.smoke)}.json"
    sources = [path] if settings.resume and path.is_file() else []
    sources += settings.merge

    def protocol(block: dict) -> dict:
        return {k: v for k, v in block.items() if k not in RUN_LIST_KEYS}

    runs: dict[tuple[str, int], dict] = {}
    for source in sources:
        previous = json.loads(source.read_text(encoding="utf-8"))
        if protocol(previous.get("setting", {})) != protocol(json.loads(json.dumps(setting))):
            raise SystemExit(
                f"error: {source} holds another setting; --resume and --merge need the same "
                "options"
            )
        for entry in previous["runs"]:
            key = (entry["variant"], entry["seed"])
            if entry["variant"] == "raw":
                continue
            if key in runs:
                progress(f"{key[0]} seed {key[1]} of {source}: made already, the first is kept")
                continue
            runs[key] = entry
    return list(runs.values())


@dataclass(frozen=True)
class Job:
    """What every trained run of one invocation shares: the texts it trains on, the splits it is
    scored on and the matched config. Picklable, so that worker processes get it whole."""

    settings: Settings
    splits: dict[str, DatasetSplits]
    train_texts: tuple[str, ...]
    train_labels: np.ndarray | None
    base: FinetuneConfig
    stem: str

    def score(self, encode) -> dict:
        """Every scored dataset's LR and 5-NN scores of the vectors ``encode(texts)`` gives."""
        dims = list(self.settings.dims)
        return {
            name: _scores(encode(s.train.texts), s.train.labels[:, -1], encode(s.test.texts),
                          s.test.labels[:, -1], dims)
            for name, s in self.splits.items()
        }


def device_name(device: torch.device) -> str:
    """``cpu``, or ``cuda (NVIDIA H200)``: what a run trained on."""
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return device.type


def train_run(job: Job, variant: str, seed: int, progress: bool) -> dict:
    """Train and score one ``(variant, seed)`` run: its entry of the results file. Runs in the
    benchmark's process, or in a worker process of its own under ``--workers``."""
    settings = job.settings
    torch.set_num_threads(settings.threads)
    machine = run_stamp()
    encoder = FrozenEncoder(max_tokens=settings.max_tokens)
    machine["device"] = device_name(encoder.device)
    config = variant_config(job.base, variant, seed)
    checkpoint = (
        FinetuneCheckpoint(settings.checkpoint_dir / f"{job.stem}-{variant}-seed{seed}.pt")
        if settings.checkpoint_dir
        else None
    )
    result = finetune(encoder, job.train_texts, job.train_labels, config, progress=progress,
                      checkpoint=checkpoint)
    scores = job.score(lambda texts: embed_texts(result, encoder, texts))
    machine["load_average_1_5_15_min_at_end"] = load_average()
    return {"variant": variant, "objective": config.objective, "without": list(config.without),
            "options": dict(config.options), "seed": seed,
            "train_seconds": result.train_seconds, "sessions": result.sessions,
            "history": result.history, "scores": scores, "machine": machine}


def _trained_runs(job: Job, plan: list[tuple[str, int]], progress: Progress) -> Iterator[dict]:
    """The runs of ``plan``, each as it finishes: one after the other, or ``--workers`` at once
    in worker processes (spawned, so that each opens the GPU, if any, for itself)."""
    workers = min(job.settings.workers, len(plan))
    if workers <= 1:
        for variant, seed in plan:
            yield train_run(job, variant, seed, progress.enabled)
        return
    progress(f"{len(plan)} runs on {workers} worker processes")
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [pool.submit(train_run, job, variant, seed, False) for variant, seed in plan]
        for future in as_completed(futures):
            yield future.result()


def run(settings: Settings, progress: Progress) -> dict:
    _check(settings)
    torch.set_num_threads(settings.threads)
    unsupervised = settings.task_loss == "simcse"
    eval_names = list(settings.eval_datasets or (settings.dataset,))
    splits: dict[str, DatasetSplits] = {
        name: load_dataset(name, max_train=settings.max_train, max_test=settings.max_test)
        for name in eval_names
    }
    if unsupervised:
        corpus = unlabelled_corpus(data_dir(), settings.corpus_size)
        train_texts, train_labels = corpus.texts, None
        corpus_note = {"corpus_per_source": corpus.per_source, "corpus_seed": corpus.seed}
    else:
        train_split = splits.get(settings.dataset) or load_dataset(
            settings.dataset, max_train=settings.max_train, max_test=settings.max_test
        )
        train_texts, train_labels = train_split.train.texts, train_split.train.labels[:, -1]
        corpus_note = {}
    dims = list(settings.dims)
    steps = (
        settings.epochs * (len(train_texts) // settings.batch_size)
        if settings.epochs
        else settings.steps
    )
    base = FinetuneConfig(
        dim=dims[-1], prefix_dims=tuple(dims), unfreeze_layers=settings.unfreeze_layers,
        steps=steps, batch_size=settings.batch_size, task_loss=settings.task_loss,
    )
    setting = {
        "training_texts": len(train_texts),
        **corpus_note,
        "epochs": settings.epochs,
        **{name: {"lr_train_texts": len(s.train), "test_texts": len(s.test)}
           for name, s in splits.items()},
        "max_tokens": settings.max_tokens,
        "seeds": list(settings.seeds),
        "ablations": list(settings.ablations),
        "ablation_seeds": list(settings.ablation_seeds),
        **{k: v for k, v in base.to_json().items() if k not in PER_RUN_KEYS},
        "objectives": list(settings.objectives),
    }
    payload = {
        "task_loss": settings.task_loss,
        "eval_datasets": eval_names,
        "dims": dims,
        "setting": setting,
        "machine": {"torch_threads": settings.threads, "workers": settings.workers},
        "paper_banking77_lr_f1": {"dims": PAPER_DIMS, **PAPER_BANKING77},
        "runs": [],
        "targets": [],
    }
    stem = file_stem(results_name(settings), progress.smoke)
    job = Job(settings, splits, tuple(train_texts), train_labels, base, stem)
    finished = _finished_runs(settings, progress, setting)
    raw_encoder = FrozenEncoder(max_tokens=settings.max_tokens)
    payload["machine"]["device"] = device_name(raw_encoder.device)
    raw_scores = job.score(
        lambda texts: raw_encoder.encode(list(texts), progress=False)[:, : dims[-1]]
    )
    payload["runs"] = [{"variant": "raw", "seed": 0, "train_seconds": 0.0, "scores": raw_scores},
                       *finished]
    done = {(r["variant"], r["seed"]) for r in finished}
    plan = [(variant, seed) for seed in settings.seeds for variant in settings.objectives]
    plan += [(variant, seed) for seed in settings.ablation_seeds for variant in settings.ablations]
    for variant, seed in plan:
        if (variant, seed) in done:
            progress(f"{variant} seed {seed}: made already (results file or --merge)")
    plan = [run for run in plan if run not in done]
    for entry in _trained_runs(job, plan, progress):
        payload["runs"].append(entry)
        f1 = {name: round(s["lr_macro_f1"][0] * 100, 2) for name, s in entry["scores"].items()}
        progress(f"{entry['variant']} seed {entry['seed']}: F1@{dims[0]} {f1} "
                 f"({_seconds(entry['train_seconds'])} s, {steps} steps, "
                 f"{len(entry['sessions'])} session(s), {entry['machine']['device']})")
        payload["summary"] = _summarise(payload["runs"], eval_names)
        payload["targets"] = _targets(payload)
        progress.checkpoint(payload, plot=True)
    payload["summary"] = _summarise(payload["runs"], eval_names)
    payload["targets"] = _targets(payload)
    return payload
