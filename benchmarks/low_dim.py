"""Low-dimension evaluation of MIC and MIPIC against a matched MRL (MIC/MIPIC papers, Table 1).

Each objective trains the same encoder on the same texts with the same steps, batches, unfrozen
layers and learning rates (:class:`training.finetune.FinetuneConfig`, only ``objective``
differs); every trained encoder is then scored at each nested dimension by logistic-regression
macro F1 on frozen features (:mod:`training.evaluation.linear_probe`) and 5-NN accuracy
(:mod:`training.evaluation.knn`). The untrained encoder's own prefixes are the ``raw`` row.

    python -m benchmarks.low_dim                        # Banking77, 3,000 training texts
    python -m benchmarks.low_dim --dataset clinc150 --max-train 3000 --max-test 3000
    python -m benchmarks.low_dim --smoke --out /tmp/x   # seconds; what CI runs

Writes ``low_dim_<dataset>.{json,md,png}`` (``_smoke`` in smoke runs) under ``--out``; the JSON
is rewritten after every run, so an interrupted benchmark keeps what it measured.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.reporting import bullet_sections, markdown_table, record_end_load, write_results  # noqa: E402
from benchmarks.search_measure import machine_header  # noqa: E402
from training.data.registry import load_dataset  # noqa: E402
from training.evaluation.knn import knn_accuracy_table  # noqa: E402
from training.evaluation.linear_probe import logistic_regression_f1  # noqa: E402
from training.finetune import FinetuneConfig, embed_texts, finetune  # noqa: E402
from training.frozen_encoder import FrozenEncoder  # noqa: E402

RESULTS = Path(__file__).parent / "results"
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
PER_RUN_KEYS = ("objective", "fragment_dim", "seed")


def _evaluate(train_vectors, train_labels, test_vectors, test_labels, dims) -> dict:
    f1 = logistic_regression_f1(train_vectors, train_labels, test_vectors, test_labels, dims)
    knn = knn_accuracy_table(
        train_vectors, train_labels[:, None], test_vectors, test_labels[:, None], dims
    )[0]
    return {"lr_macro_f1": f1.tolist(), "knn_accuracy": knn.tolist()}


def _markdown(payload: dict) -> str:
    dims = payload["dims"]
    lines = [f"# Low-dimension evaluation: {payload['dataset']}", ""]
    for metric, title in (("lr_macro_f1", "Logistic-regression macro F1"), ("knn_accuracy",
                                                                             "5-NN accuracy")):
        lines += [f"## {title} (×100, mean over seeds)", ""]
        rows = []
        for objective, summary in payload["summary"].items():
            rows.append([objective, summary["seeds"]] + [f"{v * 100:.2f}" for v in summary[metric]])
        lines += [markdown_table(["objective", "seeds", *map(str, dims)], rows), ""]
        if "mrl" in payload["summary"]:
            base = np.asarray(payload["summary"]["mrl"][metric])
            rows = [
                [objective, *(f"{d * 100:+.2f}" for d in np.asarray(s[metric]) - base)]
                for objective, s in payload["summary"].items()
                if objective not in ("mrl", "raw")
            ]
            lines += ["Difference to matched MRL (points):", ""]
            lines += [markdown_table(["objective", *map(str, dims)], rows), ""]
    lines += ["## Per run", ""]
    lines += [
        markdown_table(
            ["objective", "seed", "train s", *(f"F1@{d}" for d in dims)],
            [
                [r["objective"], r["seed"], f"{r['train_seconds']:.0f}"]
                + [f"{v * 100:.2f}" for v in r["lr_macro_f1"]]
                for r in payload["runs"]
            ],
        ),
        "",
        *bullet_sections({"Setting": payload["setting"], "Machine": payload["machine"]}),
    ]
    return "\n".join(lines)


def _summarise(runs: list[dict]) -> dict:
    summary: dict[str, dict] = {}
    for objective in dict.fromkeys(r["objective"] for r in runs):
        mine = [r for r in runs if r["objective"] == objective]
        summary[objective] = {
            "seeds": len(mine),
            **{
                metric: np.mean([r[metric] for r in mine], axis=0).tolist()
                for metric in ("lr_macro_f1", "knn_accuracy")
            },
        }
    return summary


def _plot(payload: dict, path: Path) -> None:
    figure, axis = plt.subplots(figsize=(6, 4))
    for objective, summary in payload["summary"].items():
        axis.plot(payload["dims"], np.asarray(summary["lr_macro_f1"]) * 100, marker="o",
                  label=objective)
    axis.set_xscale("log", base=2)
    axis.set_xticks(payload["dims"], [str(d) for d in payload["dims"]])
    axis.set_xlabel("prefix dimension")
    axis.set_ylabel("LR macro F1 (%)")
    axis.set_title(f"{payload['dataset']}: nested prefixes")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def run(args: argparse.Namespace) -> list[Path]:
    torch.set_num_threads(args.threads)
    splits = load_dataset(args.dataset, max_train=args.max_train, max_test=args.max_test)
    train_labels = splits.train.labels[:, -1]
    test_labels = splits.test.labels[:, -1]
    base = FinetuneConfig(
        dim=args.dims[-1], prefix_dims=tuple(args.dims), unfreeze_layers=args.unfreeze_layers,
        steps=args.steps, batch_size=args.batch_size,
    )
    name = f"low_dim_{Path(args.dataset).name}" + ("_smoke" if args.smoke else "")
    payload = {
        "dataset": args.dataset,
        "smoke": args.smoke,
        "dims": list(args.dims),
        "setting": {
            "train_texts": len(splits.train), "test_texts": len(splits.test),
            "max_tokens": args.max_tokens, "seeds": args.seeds,
            **{k: v for k, v in base.to_json().items() if k not in PER_RUN_KEYS},
            "objectives": args.objectives,
        },
        "machine": {**machine_header(1), "torch_threads": args.threads},
        "paper_banking77_lr_f1": {"dims": PAPER_DIMS, **PAPER_BANKING77},
        "runs": [],
    }
    raw_encoder = FrozenEncoder(max_tokens=args.max_tokens)
    train_features = raw_encoder.encode(list(splits.train.texts), progress=False)
    test_features = raw_encoder.encode(list(splits.test.texts), progress=False)
    raw = _evaluate(
        train_features[:, : args.dims[-1]], train_labels,
        test_features[:, : args.dims[-1]], test_labels, args.dims,
    )
    payload["runs"].append({"objective": "raw", "seed": 0, "train_seconds": 0.0, **raw})
    # A frozen backbone is shared by every run and its features are computed once.
    frozen = args.unfreeze_layers == 0
    paths: list[Path] = []
    for seed in args.seeds:
        for objective in args.objectives:
            encoder = raw_encoder if frozen else FrozenEncoder(max_tokens=args.max_tokens)
            config = replace(base, objective=objective, seed=seed)
            start = time.perf_counter()
            result = finetune(encoder, splits.train.texts, train_labels, config,
                              features=train_features if frozen else None,
                              progress=not args.no_progress)
            seconds = time.perf_counter() - start
            scores = _evaluate(
                embed_texts(result, encoder, splits.train.texts,
                            features=train_features if frozen else None),
                train_labels,
                embed_texts(result, encoder, splits.test.texts,
                            features=test_features if frozen else None),
                test_labels,
                args.dims,
            )
            payload["runs"].append({"objective": objective, "seed": seed,
                                    "train_seconds": seconds, "history": result.history,
                                    **scores})
            f1 = np.round(np.array(scores["lr_macro_f1"]) * 100, 2)
            print(f"{objective} seed {seed}: F1 {f1} ({seconds:.0f} s)", flush=True)
            payload["summary"] = _summarise(payload["runs"])
            record_end_load(payload["machine"])
            paths = write_results(args.out, name, payload, _markdown(payload))
    _plot(payload, args.out / f"{name}.png")
    return [*paths, args.out / f"{name}.png"]


def _int_list(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="banking77")
    parser.add_argument("--max-train", type=int, default=3000, help="the papers sample 3,000")
    parser.add_argument("--max-test", type=int, default=None, help="default: the whole test split")
    parser.add_argument(
        "--objectives", type=lambda s: s.split(","), default=["mrl", "mic", "mipic"]
    )
    parser.add_argument("--seeds", type=_int_list, default=[42])
    parser.add_argument("--dims", type=_int_list, default=[16, 32, 64, 128, 256, 384])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--unfreeze-layers", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--smoke", action="store_true", help="120/40 texts, 2 steps, batch 8")
    parser.add_argument("--no-progress", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.smoke:
        args.max_train, args.max_test, args.steps, args.batch_size = 120, 40, 2, 8
        args.unfreeze_layers = min(args.unfreeze_layers, 1)
    for path in run(args):
        print(path)


if __name__ == "__main__":
    main()
