"""SFS against global cosine for retrieval on CLINC-150 (SFS paper, Table 1, on our data).

A head (``R^384 → R^256`` projection on the frozen MiniLM features) is trained with the SFS
contrastive objective at each fragment size ``d_frag ∈ {256, 128, 64, 32, 16}``
(:class:`training.objectives.sfs.SFSLoss`; ``d_frag = 256`` is one fragment, i.e. the
global-cosine-trained baseline). Every trained head is then scored with every similarity — global
cosine and SFS at each fragment size — by Recall@1, Recall@10 and MRR@10 of the test utterances
against the training utterances, relevant = same intent (:mod:`training.evaluation.ranking`).

    python -m benchmarks.sfs_retrieval                   # CLINC-150, 10,000 / 2,000 texts, 3 seeds
    python -m benchmarks.sfs_retrieval --smoke --out /tmp/x

Writes ``sfs_retrieval_<dataset>.{json,md}`` (``_smoke`` in smoke runs) under ``--out``.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from benchmarks.reporting import bullet_sections, markdown_table, record_end_load, write_results
from benchmarks.search_measure import machine_header
from training.evaluation.ranking import ranking_metrics
from training.finetune import FinetuneConfig, embed_texts, finetune
from training.frozen_encoder import FrozenEncoder
from training.prepared_data import DataConfig, prepare_data

RESULTS = Path(__file__).parent / "results"
FRAGMENT_DIMS = (256, 128, 64, 32, 16)
METRICS = ("recall@1", "recall@10", "mrr@10")


def _score_name(fragment_dim: int, dim: int) -> str:
    return "cosine" if fragment_dim == dim else f"sfs-{fragment_dim}"


def _markdown(payload: dict) -> str:
    dim = payload["setting"]["dim"]
    lines = [f"# SFS vs global cosine: {payload['dataset']}", ""]
    mean = payload["mean"]
    lines += [
        "## Trained and scored with the same fragment size, against the same model scored by "
        "global cosine (×100, mean over seeds)",
        "",
    ]
    rows = []
    for fragment_dim in payload["fragment_dims"]:
        own = mean[str(fragment_dim)][_score_name(fragment_dim, dim)]
        cosine = mean[str(fragment_dim)]["cosine"]
        rows.append(
            [f"({dim // fragment_dim}, {fragment_dim})"]
            + [f"{own[m] * 100:.2f}" for m in METRICS]
            + [f"{cosine[m] * 100:.2f}" for m in METRICS]
            + [f"{(own['mrr@10'] - cosine['mrr@10']) * 100:+.2f}"]
        )
    headers = ["trained (N_f, d_frag)", *(f"SFS {m}" for m in METRICS),
               *(f"cosine {m}" for m in METRICS), "ΔMRR@10"]
    lines += [markdown_table(headers, rows), ""]
    lines += ["## MRR@10 of every trained head under every scoring (×100, mean over seeds)", ""]
    scorings = [_score_name(f, dim) for f in payload["fragment_dims"]]
    lines += [
        markdown_table(
            ["trained d_frag", *scorings],
            [[str(f)] + [f"{mean[str(f)][s]['mrr@10'] * 100:.2f}" for s in scorings]
             for f in payload["fragment_dims"]],
        ),
        "",
        *bullet_sections({"Setting": payload["setting"], "Machine": payload["machine"]}),
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> list[Path]:
    torch.set_num_threads(1)
    machine = machine_header(1)
    encoder = FrozenEncoder()
    data = prepare_data(DataConfig(args.dataset, args.max_train, args.max_test), encoder,
                        progress=False)
    train_labels, test_labels = data.splits.train.labels[:, -1], data.splits.test.labels[:, -1]
    base = FinetuneConfig(objective="sfs", dim=args.dim, prefix_dims=(args.dim,),
                          unfreeze_layers=0, steps=args.steps, batch_size=args.batch_size)
    scorings = {_score_name(f, args.dim): (None if f == args.dim else f) for f in args.fragments}
    scores: dict[str, dict[str, list[dict]]] = {}
    start = time.perf_counter()
    for fragment_dim in args.fragments:
        for seed in args.seeds:
            config = replace(base, fragment_dim=fragment_dim, seed=seed)
            result = finetune(encoder, data.splits.train.texts, train_labels, config,
                              features=data.train_features, progress=False)
            train_vectors = embed_texts(result, encoder, (), features=data.train_features)
            test_vectors = embed_texts(result, encoder, (), features=data.test_features)
            for name, scoring in scorings.items():
                scores.setdefault(str(fragment_dim), {}).setdefault(name, []).append(
                    ranking_metrics(train_vectors, train_labels, test_vectors, test_labels,
                                    fragment_dim=scoring)
                )
    mean = {
        trained: {
            name: {m: float(np.mean([r[m] for r in runs])) for m in METRICS}
            for name, runs in by_scoring.items()
        }
        for trained, by_scoring in scores.items()
    }
    record_end_load(machine)
    payload = {
        "dataset": args.dataset,
        "smoke": args.smoke,
        "fragment_dims": list(args.fragments),
        "setting": {
            "train_texts": len(data.splits.train), "test_texts": len(data.splits.test),
            "seeds": args.seeds, **base.to_json(), "fragment_dim": "per row",
            "seconds_total": round(time.perf_counter() - start, 1),
        },
        "machine": machine,
        "mean": mean,
        "per_seed": scores,
    }
    name = f"sfs_retrieval_{Path(args.dataset).name}" + ("_smoke" if args.smoke else "")
    return write_results(args.out, name, payload, _markdown(payload))


def _int_list(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="clinc150")
    parser.add_argument("--max-train", type=int, default=10000)
    parser.add_argument("--max-test", type=int, default=2000)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--fragments", type=_int_list, default=list(FRAGMENT_DIMS))
    parser.add_argument("--seeds", type=_int_list, default=[42, 123, 456])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--smoke", action="store_true", help="1,500/300 texts, 20 steps, 1 seed")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.smoke:
        args.max_train, args.max_test, args.steps, args.seeds = 1500, 300, 20, [42]
    for path in run(args):
        print(path)


if __name__ == "__main__":
    main()
