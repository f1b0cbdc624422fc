"""Evaluate MSHC the way the paper does (Tables 10–14, 16, 19, 20), on held-out test texts.

"Score" follows the paper's Metric 1–4 (§4.3), on CLINC-150's intents:

- ``rho``: Spearman ρ between cosine distances of 1,000 random test pairs in the **original**
  space (the frozen encoder's full vector) and in the compressed one;
- ``knn``: k-NN (k = 5) intent accuracy, test texts against the training texts;
- ``mrr``: MRR@10, test texts querying the training texts, relevant = same intent.

A stage's "kept" share is its score divided by the original's. The VQ variants are compared by
the share of the MRL-96 input's ρ that they keep (the paper's VQ: 0.2131 / 0.7465, i.e. −71% on
its Table 13; its text rounds the drop to "29%").
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from index.faiss_indexes import pq_from_codebooks
from training.evaluation.compression import (
    adapter_accuracy,
    c2f_mrr_at_10,
    distance_spearman,
    mrr_at_10,
    random_pairs,
    reciprocal_ranks,
    shortlist_mrr_at_10,
    unit_rows,
)
from training.evaluation.knn import knn_accuracy_table
from training.mshc.baselines import baselines
from training.mshc.pipeline import (
    STAGES,
    MSHCConfig,
    MSHCModel,
    train_mrl_head,
    train_mshc,
    train_quantizer,
)
from training.mshc.pq import ProductQuantizer
from training.mshc.sae import zero_fraction
from training.mshc.vq import SoftToHardVQ
from training.prepared_data import PreparedData

FLOAT_BYTES = 4
SHORTLISTS = (50, 100)
# The VQ stage's alternatives: (name, quantizer, config overrides).
VQ_VARIANTS = (
    ("vq", "vq", {}),
    ("rvq", "rvq", {}),
    ("rvq-16", "rvq", {"rvq_stages": 16}),
    ("fsq", "fsq", {}),
    ("fsq-96x7", "fsq", {"fsq_latent_dim": 96, "fsq_levels": 7}),
)


class Scorer:
    """Scores vectors of the test texts (and of the training texts, their corpus)."""

    def __init__(self, data: PreparedData, num_pairs: int, seed: int) -> None:
        self.train_labels = data.splits.train.labels[:, -1:]
        self.test_labels = data.splits.test.labels[:, -1:]
        self.original_test = data.test_features
        self.pairs = random_pairs(len(data.test_features), num_pairs, seed)
        self.original = self.score(data.train_features, data.test_features)

    def score(self, train: np.ndarray, test: np.ndarray) -> dict[str, float]:
        train, test = np.asarray(train, np.float32), np.asarray(test, np.float32)
        knn = knn_accuracy_table(
            train, self.train_labels, test, self.test_labels, [train.shape[1]]
        )
        return {
            "rho": distance_spearman(self.original_test, test, self.pairs),
            "knn": float(knn[0, 0]),
            "mrr": mrr_at_10(train, self.train_labels[:, 0], test, self.test_labels[:, 0]),
        }

    def row(self, name: str, train: np.ndarray, test: np.ndarray, nbytes: int, **extra) -> dict:
        scores = self.score(train, test)
        kept = {f"{key}_kept": scores[key] / self.original[key] for key in scores}
        original_bytes = FLOAT_BYTES * self.original_test.shape[1]
        return {
            "name": name,
            "dim": int(test.shape[1]),
            **scores,
            **kept,
            "bytes_per_vector": nbytes,
            "compression": original_bytes / nbytes,
            **extra,
        }


def _stage_bytes(model: MSHCModel, stage: str) -> int:
    config = model.config
    if stage == "mrl":
        return FLOAT_BYTES * config.coarse_dim
    if stage == "vq":
        return model.quantizer.bytes_per_vector()
    if stage == "pq":
        return model.pq.bytes_per_vector()
    return FLOAT_BYTES * config.code_dim


def _as_numpy(stages: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    return {name: tensor.numpy() for name, tensor in stages.items()}


def codebook_usage(codes: np.ndarray, size: int) -> dict[str, float]:
    """Share of codewords used at all, and the perplexity ``exp(H)`` of their use."""
    counts = np.bincount(codes.ravel(), minlength=size)
    p = counts[counts > 0] / counts.sum()
    return {"used": float(np.mean(counts > 0)), "perplexity": float(np.exp(-(p * np.log(p)).sum()))}


def evaluate_mshc(
    data: PreparedData,
    config: MSHCConfig,
    *,
    num_pairs: int = 1000,
    adapter_fraction: float = 0.1,
    adapter_epochs: int = 20,
    progress: bool = False,
) -> tuple[MSHCModel, ProductQuantizer, dict]:
    """Train the pipeline, its removals and the VQ variants; score them all.

    Returns the full model (``config.quantizer`` as its VQ stage), the PQ the service uses (8-byte
    codes of the continuous MRL-96 prefix) and the results as a JSON-ready dictionary.
    """
    train_x = torch.from_numpy(np.ascontiguousarray(data.train_features, np.float32))
    test_x = torch.from_numpy(np.ascontiguousarray(data.test_features, np.float32))
    fine_train = data.splits.train.labels[:, -1]
    fine_test = data.splits.test.labels[:, -1]
    num_fine = data.num_classes[-1]
    scorer = Scorer(data, num_pairs, config.seed)
    original_dim = data.train_features.shape[1]

    head = train_mrl_head(train_x, torch.from_numpy(fine_train), num_fine, config, progress)
    model = train_mshc(data.train_features, fine_train, num_fine, config, head=head)
    train_out, test_out = _as_numpy(model.stages(train_x)), _as_numpy(model.stages(test_x))
    full_train, full_test = model.full(train_x).numpy(), model.full(test_x).numpy()

    cumulative = [
        scorer.row("original", data.train_features, data.test_features,
                   FLOAT_BYTES * original_dim),
        scorer.row("mrl-full", full_train, full_test, FLOAT_BYTES * config.dim),
    ]
    for stage in ("mrl", "vq", "pq", "sae", "kd"):
        extra = {}
        if stage in ("sae", "kd"):
            extra["zero_fraction"] = zero_fraction(torch.from_numpy(test_out[stage]))
        cumulative.append(
            scorer.row(f"+{stage}", train_out[stage], test_out[stage],
                       _stage_bytes(model, stage), **extra)
        )

    code_bytes = FLOAT_BYTES * config.code_dim
    removal = [scorer.row("full", train_out["kd"], test_out["kd"], code_bytes)]
    for stage in STAGES:
        ablated = train_mshc(
            data.train_features, fine_train, num_fine, replace(config, skip=(stage,)), head=head
        )
        removal.append(
            scorer.row(f"-{stage}", ablated.code(train_x).numpy(), ablated.code(test_x).numpy(),
                       code_bytes)
        )

    mrl_train, mrl_test = train_out["mrl"], test_out["mrl"]
    mrl_rho = next(row["rho"] for row in cumulative if row["name"] == "+mrl")
    variants = []
    for name, kind, overrides in VQ_VARIANTS:
        quantizer = (
            model.quantizer if name == config.quantizer
            else train_quantizer(
                torch.from_numpy(mrl_train), replace(config, quantizer=kind, **overrides)
            )
        )
        q_train = quantizer.quantize(torch.from_numpy(mrl_train)).numpy()
        q_test = quantizer.quantize(torch.from_numpy(mrl_test)).numpy()
        extra: dict = {"rho_vs_input": distance_spearman(mrl_test, q_test, scorer.pairs)}
        if isinstance(quantizer, SoftToHardVQ):
            extra |= codebook_usage(quantizer.encode(torch.from_numpy(mrl_test)).numpy(),
                                    quantizer.size)
        row = scorer.row(name, q_train, q_test, quantizer.bytes_per_vector(), **extra)
        row["rho_loss_vs_mrl96"] = 1.0 - row["rho"] / mrl_rho
        variants.append(row)

    baseline_rows = []
    raw_train = np.ascontiguousarray(data.train_features, np.float32)
    raw_test = np.ascontiguousarray(data.test_features, np.float32)
    for name, compress in baselines(config.coarse_dim, config.seed).items():
        b_train, b_test, nbytes = compress(raw_train, raw_test)
        baseline_rows.append(scorer.row(name, b_train, b_test, nbytes))
    baseline_rows += [
        {**next(r for r in cumulative if r["name"] == "+mrl"), "name": "MRL only"},
        {**removal[0], "name": "MSHC full"},
    ]

    served_pq = ProductQuantizer.trained(mrl_train, config.pq_m, config.pq_nbits)
    retrieval = _retrieval(
        data, scorer, mrl_train, mrl_test, test_out["kd"], train_out["kd"],
        full_train, full_test, served_pq,
    )

    adapter_options = {"fraction": adapter_fraction, "epochs": adapter_epochs, "seed": config.seed}
    finetune = {
        "fraction": adapter_fraction,
        "epochs": adapter_epochs,
        "original_knn": scorer.original["knn"],
        "compressed_knn": removal[0]["knn"],
        "adapter_on_compressed": adapter_accuracy(
            train_out["kd"], fine_train, test_out["kd"], fine_test, **adapter_options
        ),
        "adapter_on_original": adapter_accuracy(
            data.train_features, fine_train, data.test_features, fine_test, **adapter_options
        ),
    }
    finetune["recovery"] = finetune["adapter_on_compressed"] / finetune["original_knn"]
    finetune["recovery_vs_adapter_on_original"] = (
        finetune["adapter_on_compressed"] / finetune["adapter_on_original"]
    )

    results = {
        "config": config.to_json(),
        "data": {
            "dataset": data.config.dataset,
            "train": len(data.train_features),
            "test": len(data.test_features),
            "pairs": num_pairs,
            "encoder": data.encoder.config.source,
            "original_dim": original_dim,
        },
        "original": scorer.original,
        "cumulative": cumulative,
        "baselines": baseline_rows,
        "removal": removal,
        "vq_variants": variants,
        "retrieval": retrieval,
        "finetune": finetune,
        "efficiency": _efficiency(original_dim, config, served_pq, variants),
    }
    return model, served_pq, results


def _retrieval(
    data: PreparedData,
    scorer: Scorer,
    mrl_train: np.ndarray,
    mrl_test: np.ndarray,
    code_test: np.ndarray,
    code_train: np.ndarray,
    full_train: np.ndarray,
    full_test: np.ndarray,
    served_pq: ProductQuantizer,
) -> list[dict]:
    """Table 19: MRR@10 of single-scale and coarse-to-fine search, relative to the full MRL
    vector; plus the 8-byte PQ index over the 96-d prefix, without and with exact re-ranking."""
    corpus_labels = data.splits.train.labels[:, -1]
    query_labels = data.splits.test.labels[:, -1]
    full = mrr_at_10(full_train, corpus_labels, full_test, query_labels)
    rows = [
        ("full", full),
        ("coarse only", mrr_at_10(mrl_train, corpus_labels, mrl_test, query_labels)),
        ("code only", mrr_at_10(code_train, corpus_labels, code_test, query_labels)),
    ]
    for k in SHORTLISTS:
        rows.append((f"c2f coarse->full k={k}", c2f_mrr_at_10(
            mrl_train, mrl_test, full_train, full_test, corpus_labels, query_labels, k)))
    rows.append(("c2f code->full k=100", c2f_mrr_at_10(
        code_train, code_test, full_train, full_test, corpus_labels, query_labels, 100)))
    index = pq_from_codebooks(served_pq.codebooks)
    index.add(unit_rows(mrl_train))
    _, candidates = index.search(unit_rows(mrl_test), 10)
    rows.append(("pq 8B only", float(reciprocal_ranks(corpus_labels[candidates], query_labels)
                                     .mean())))
    for k in SHORTLISTS:
        _, candidates = index.search(unit_rows(mrl_test), k)
        rows.append((f"pq 8B + rerank k={k}", shortlist_mrr_at_10(
            candidates, full_train, full_test, corpus_labels, query_labels)))
    return [{"name": name, "mrr": value, "relative": value / full} for name, value in rows]


def _efficiency(original_dim: int, config: MSHCConfig, pq: ProductQuantizer, variants) -> list:
    """Table 20: bytes per vector, memory per million vectors and compression ratio."""
    original = FLOAT_BYTES * original_dim
    entries = [(f"{d}-d float32", FLOAT_BYTES * d) for d in sorted({*config.prefix_dims,
                                                                   original_dim})[::-1]]
    entries.append((f"{config.code_dim}-d SAE code float32", FLOAT_BYTES * config.code_dim))
    entries.append((f"PQ m={pq.m} nbits={pq.nbits}", pq.bytes_per_vector()))
    entries += [(f"{row['name']} codes", row["bytes_per_vector"]) for row in variants]
    return [
        {"name": name, "bytes_per_vector": b, "gb_per_million": b * 1e6 / 2**30,
         "compression": original / b}
        for name, b in entries
    ]
