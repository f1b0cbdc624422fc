"""Vectors for the search benchmarks.

- **Real**: a trained head's 256-d embeddings (V5, or MRL for comparison) of every distinct
  sentence in the data folder (CLINC-150 train/val/test and out-of-scope rows, the CLINC Wikipedia
  sentences, Banking77 train/test). The frozen features are cached on disk by
  :func:`training.frozen_encoder.cached_features`; the head is trained with the project's
  defaults on the CLINC-150 training subsample.
- **Synthetic**: vectors drawn from a :class:`GaussianMixture` fitted to the real embeddings:
  k-means cluster means and weights, plus one within-cluster covariance shared by all clusters
  (full 256×256). Every prefix of a draw then has the real prefix's mean and covariance, both
  within and between clusters; with one cluster it is a single full-covariance Gaussian.
- **iid Gaussian**: independent standard normal coordinates, the setup of the Fractal Embeddings
  paper's Table 9.
- **Toy**: a small two-level cluster hierarchy with no encoder, for smoke runs.

All vectors are full and unnormalised; the benchmarks normalise each prefix with
:func:`index.vectors.prefix_unit`, as the index does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np

CLINC_PARTS = ("train", "val", "test", "oos_train", "oos_val", "oos_test")


@dataclass(frozen=True)
class RealEmbeddings:
    """V5 embeddings of the real sentences, and how they were made."""

    vectors: np.ndarray
    description: dict


def clinc_test_texts(data_dir: Path) -> list[str]:
    """CLINC-150's test utterances, each once, in the split's order (the held-out queries)."""
    clinc = json.loads((data_dir / "clinc150" / "data_full.json").read_text(encoding="utf-8"))
    return list(dict.fromkeys(text for text, _ in clinc["test"]))


def real_sentences(data_dir: Path) -> dict[str, list[str]]:
    """Every sentence in the data folder by source; a text seen in an earlier source is dropped."""
    from training.data.banking77 import load_banking77

    clinc = json.loads((data_dir / "clinc150" / "data_full.json").read_text(encoding="utf-8"))
    wiki = (data_dir / "clinc150" / "all_wiki_sents.txt").read_text(encoding="utf-8")
    banking = load_banking77(data_dir)
    sources = {
        "clinc150": [text for part in CLINC_PARTS for text, _ in clinc[part]],
        "clinc150-wiki": [line.strip() for line in wiki.splitlines() if line.strip()],
        "banking77": [*banking.train.texts, *banking.test.texts],
    }
    seen: set[str] = set()
    distinct: dict[str, list[str]] = {}
    for name, texts in sources.items():
        distinct[name] = [text for text in dict.fromkeys(texts) if text not in seen]
        seen.update(distinct[name])
    return distinct


def head_embeddings(
    objectives: Sequence[str] = ("v5",), progress: bool = False
) -> dict[str, RealEmbeddings]:
    """Encode every real sentence (cached), train one head per objective on CLINC-150 with the
    project's defaults, and embed all the sentences with each.

    torch and the encoder are imported here so that smoke runs, which use :func:`toy_embeddings`,
    never load them.
    """
    import torch

    from training.data.registry import data_dir
    from training.frozen_encoder import FrozenEncoder, cached_features
    from training.head_job import train
    from training.prepared_data import DataConfig, prepare_data
    from training.train_config import TrainConfig
    from training.trainer import embed_features

    torch.set_num_threads(1)
    encoder = FrozenEncoder()
    sentences = real_sentences(data_dir())
    features = np.concatenate(
        [
            cached_features(
                encoder, tuple(texts), dataset="all-sentences", split=name, progress=progress
            )
            for name, texts in sentences.items()
        ]
    )
    data_config = DataConfig("clinc150")
    data = prepare_data(data_config, encoder, progress=progress)
    embeddings = {}
    for objective in objectives:
        train_config = TrainConfig(objective=objective)
        head = train(data, train_config, progress=progress).head
        vectors = np.ascontiguousarray(embed_features(head, features), np.float32)
        description = {
            "sentences": {name: len(texts) for name, texts in sentences.items()},
            "total": len(vectors),
            "encoder": encoder.config.to_json(),
            "head": (
                f"{objective}, trained on CLINC-150 ({data_config.max_train} training texts, "
                f"data seed {data_config.data_seed}) with the project's default TrainConfig"
            ),
            "train_config": train_config.to_json(),
        }
        embeddings[objective] = RealEmbeddings(vectors, description)
    return embeddings


def split_queries(
    vectors: np.ndarray, num_queries: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """A random ``(base, queries)`` split; the queries are held out of the base."""
    order = np.random.default_rng(seed).permutation(len(vectors))
    return vectors[order[num_queries:]], vectors[order[:num_queries]]


@dataclass(frozen=True)
class GaussianMixture:
    """Cluster weights and means, and the lower Cholesky factor of the shared within-cluster
    covariance."""

    weights: np.ndarray
    means: np.ndarray
    cholesky: np.ndarray

    @classmethod
    def fit(cls, vectors: np.ndarray, clusters: int, seed: int) -> GaussianMixture:
        """k-means (FAISS) for the clusters, then the pooled covariance of the residuals."""
        data = np.ascontiguousarray(vectors, np.float32)
        count, dim = data.shape
        if clusters == 1:
            assignment = np.zeros(count, dtype=np.int64)
        else:
            kmeans = faiss.Kmeans(dim, clusters, niter=25, seed=seed)
            kmeans.train(data)
            assignment = kmeans.index.search(data, 1)[1][:, 0]
        _, assignment, sizes = np.unique(assignment, return_inverse=True, return_counts=True)
        sums = np.zeros((len(sizes), dim))
        np.add.at(sums, assignment, data.astype(np.float64))
        means = sums / sizes[:, None]
        residuals = data - means[assignment]
        covariance = residuals.T @ residuals / (count - len(sizes))
        jitter = 1e-6 * np.trace(covariance) / dim
        cholesky = np.linalg.cholesky(covariance + jitter * np.eye(dim))
        return cls(sizes / count, means, cholesky)

    def sample(self, count: int, seed: int) -> np.ndarray:
        """``count`` draws, float32 ``(count, dim)``."""
        rng = np.random.default_rng(seed)
        labels = rng.choice(len(self.weights), size=count, p=self.weights)
        noise = rng.standard_normal((count, self.means.shape[1]))
        return np.ascontiguousarray(self.means[labels] + noise @ self.cholesky.T, np.float32)


def iid_gaussian(count: int, dim: int, seed: int) -> np.ndarray:
    """Independent standard normal coordinates, float32 ``(count, dim)``."""
    return np.random.default_rng(seed).standard_normal((count, dim), dtype=np.float32)


def toy_embeddings(count: int, dim: int, seed: int) -> np.ndarray:
    """Smoke-test vectors: 8 coarse clusters of 6 fine ones, the fine offsets growing with the
    coordinate index so that later dimensions tell the fine clusters apart."""
    rng = np.random.default_rng(seed)
    coarse = 2.0 * rng.standard_normal((8, dim))
    fine = np.repeat(coarse, 6, axis=0) + rng.standard_normal((48, dim)) * np.linspace(
        0.2, 2.0, dim
    )
    labels = rng.integers(len(fine), size=count)
    return np.ascontiguousarray(fine[labels] + rng.standard_normal((count, dim)), np.float32)
