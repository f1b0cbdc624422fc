"""Labelled synthetic vectors at any scale: a mixture fitted to real V5 embeddings, one component
per intent, so that task quality (same-domain / same-intent precision) can be measured at 10M.

- **Labelled real sentences** (:func:`labelled_real`): the V5 embeddings of every real sentence
  with their labels. The embeddings come from a V5 head trained in-process
  (:func:`benchmarks.harness.search_data.head_embeddings`), or, given a bundle, from that bundle's
  ONNX encoder (:func:`bundle_embeddings`, no torch), so that the vectors are in the space the
  service serves for that bundle. The labels: CLINC-150 intents
  and their domains (from ``clinc150/domains.json``), Banking77's 77 intents as one more domain
  (``banking77``), and label -1 for the unlabelled sentences (CLINC's Wikipedia sentences and its
  out-of-scope rows). The queries are held-out CLINC-150 test texts.
- **The mixture** (:class:`LabelledMixture`): one component per intent with the intent's mean and
  a low-rank-plus-diagonal covariance (the top ``rank`` principal directions of its residuals,
  plus each coordinate's remaining variance), and ``unlabelled_components`` k-means components
  for the unlabelled sentences (label -1), each fitted the same way; weights are the real counts.
  :meth:`LabelledMixture.chunks` draws any number of vectors chunk by chunk (deterministic per
  chunk), so 10M × 256 never has to be held at once.
- **Toy labelled vectors** (:func:`toy_labelled`): a small domain → intent hierarchy with no
  encoder, for smoke runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np

from benchmarks.harness.search_data import (
    CLINC_PARTS,
    RealEmbeddings,
    head_embeddings,
    real_sentences,
)

UNLABELLED = -1
BANKING77_DOMAIN = "banking77"


@dataclass(frozen=True)
class LabelledVectors:
    """Full, unnormalised float32 vectors with an intent and a domain id per row (-1: none)."""

    vectors: np.ndarray
    intents: np.ndarray
    domains: np.ndarray

    def __len__(self) -> int:
        return len(self.vectors)

    def take(self, rows: np.ndarray) -> LabelledVectors:
        return LabelledVectors(self.vectors[rows], self.intents[rows], self.domains[rows])


@dataclass(frozen=True)
class LabelledReal:
    """The real embeddings split into a base set and held-out queries, with label names."""

    base: LabelledVectors
    queries: LabelledVectors
    intent_names: tuple[str, ...]
    domain_names: tuple[str, ...]
    description: dict


def _label_ids(names: list[str]) -> dict[str, int]:
    return {name: i for i, name in enumerate(names)}


def bundle_embeddings(bundle_dir: Path, texts: list[str], progress: bool) -> RealEmbeddings:
    """``texts`` embedded by the bundle's ONNX encoder (full, unnormalised vectors), on every
    available core, in batches of similar token counts
    (:func:`encoding.length_batches.token_batches`)."""
    from tokenizers import Tokenizer
    from tqdm.auto import tqdm

    from bundle import TOKENIZER_FILE, load_bundle
    from encoding.cores import available_cores
    from encoding.encoder import OnnxEncoder
    from encoding.length_batches import DEFAULT_BATCH_TOKENS, token_batches

    manifest = load_bundle(bundle_dir)
    encoder = OnnxEncoder(bundle_dir, manifest, threads=available_cores())
    tokenizer = Tokenizer.from_file(str(bundle_dir / TOKENIZER_FILE))
    tokenizer.no_padding()
    lengths = np.array([len(e.ids) for e in tokenizer.encode_batch(texts)], np.int64)
    vectors = np.empty((len(texts), manifest.dim), np.float32)
    with tqdm(total=len(texts), desc="embed", unit="text", disable=not progress) as bar:
        for positions in token_batches(lengths, DEFAULT_BATCH_TOKENS):
            vectors[positions] = encoder.encode([texts[p] for p in positions]).vectors
            bar.update(len(positions))
    description = {
        "total": len(vectors),
        "encoder": f"bundle {manifest.name} ({manifest.content_hash[:12]}), its ONNX encoder",
        "bundle": str(bundle_dir),
    }
    return RealEmbeddings(vectors, description)


def labelled_real(
    data_dir: Path, num_queries: int, seed: int, progress: bool, bundle: Path | None = None
) -> LabelledReal:
    """V5 embeddings of every real sentence with its labels; ``num_queries`` CLINC-150 test texts
    (in scope, drawn at random) are held out as queries, the rest is the base set. With
    ``bundle``, the embeddings are that bundle's (:func:`bundle_embeddings`); without, a V5
    head's trained in-process (:func:`head_embeddings`)."""
    from training.data.banking77 import load_banking77

    sentences = real_sentences(data_dir)
    clinc = json.loads((data_dir / "clinc150" / "data_full.json").read_text(encoding="utf-8"))
    domains_of = json.loads((data_dir / "clinc150" / "domains.json").read_text(encoding="utf-8"))
    banking = load_banking77(data_dir)
    banking_names = banking.train.hierarchy.label_names[-1]
    intent_names = sorted(i for intents in domains_of.values() for i in intents)
    intent_names += [f"{BANKING77_DOMAIN}/{name}" for name in banking_names]
    domain_names = [*sorted(domains_of), BANKING77_DOMAIN]
    intent_id, domain_id = _label_ids(intent_names), _label_ids(domain_names)
    domain_of_intent = {
        intent: domain_id[domain] for domain, intents in domains_of.items() for intent in intents
    }
    label: dict[str, tuple[int, int, str]] = {}  # text → (intent, domain, CLINC part)
    for part in CLINC_PARTS:
        for text, intent in clinc[part]:
            if text not in label and intent in intent_id:
                label[text] = (intent_id[intent], domain_of_intent[intent], part)
    for split in (banking.train, banking.test):
        for text, row in zip(split.texts, split.labels[:, -1], strict=True):
            name = f"{BANKING77_DOMAIN}/{banking_names[row]}"
            label.setdefault(text, (intent_id[name], domain_id[BANKING77_DOMAIN], "banking77"))
    texts = [text for source in sentences.values() for text in source]
    labels = [label.get(text, (UNLABELLED, UNLABELLED, "unlabelled")) for text in texts]
    if bundle is None:
        embeddings = head_embeddings(("v5",), progress=progress)["v5"]
    else:
        embeddings = bundle_embeddings(bundle, texts, progress)
    everything = LabelledVectors(
        embeddings.vectors,
        np.array([intent for intent, _, _ in labels], np.int32),
        np.array([domain for _, domain, _ in labels], np.int32),
    )
    test = np.flatnonzero([part == "test" for _, _, part in labels])
    chosen = np.random.default_rng(seed).choice(test, min(num_queries, len(test)), replace=False)
    base = np.setdiff1d(np.arange(len(texts)), chosen)
    description = embeddings.description | {
        "labelled": int((everything.intents >= 0).sum()),
        "unlabelled (Wikipedia and out-of-scope sentences)": int((everything.intents < 0).sum()),
        "intents": len(intent_names),
        "domains": f"{len(domain_names)} (CLINC-150's 10, plus Banking77 as one)",
        "queries": f"{len(chosen):,} held-out CLINC-150 test texts (in scope), seed {seed}",
    }
    return LabelledReal(
        everything.take(base),
        everything.take(chosen),
        tuple(intent_names),
        tuple(domain_names),
        description,
    )


def toy_labelled(count: int, dim: int, seed: int) -> LabelledVectors:
    """Smoke-test vectors: 8 domains of 6 intents (offsets growing with the coordinate index, so
    later dimensions tell the intents apart) and one unlabelled row in eight."""
    rng = np.random.default_rng(seed)
    domain_means = 2.0 * rng.standard_normal((8, dim))
    intent_means = np.repeat(domain_means, 6, axis=0) + rng.standard_normal(
        (48, dim)
    ) * np.linspace(0.2, 2.0, dim)
    intents = rng.integers(len(intent_means), size=count)
    vectors = intent_means[intents] + rng.standard_normal((count, dim))
    unlabelled = rng.random(count) < 0.125
    vectors[unlabelled] = 3.0 * rng.standard_normal((int(unlabelled.sum()), dim))
    intents = np.where(unlabelled, UNLABELLED, intents).astype(np.int32)
    domains = np.where(unlabelled, UNLABELLED, intents // 6).astype(np.int32)
    return LabelledVectors(np.ascontiguousarray(vectors, np.float32), intents, domains)


@dataclass(frozen=True)
class LabelledMixture:
    """Components with weights, means, low-rank factors ``(c, dim, rank)`` and diagonal standard
    deviations ``(c, dim)``, and the intent and domain label of each component."""

    weights: np.ndarray
    means: np.ndarray
    factors: np.ndarray
    scales: np.ndarray
    intents: np.ndarray
    domains: np.ndarray

    @classmethod
    def fit(
        cls, real: LabelledVectors, rank: int, unlabelled_components: int, seed: int
    ) -> LabelledMixture:
        """One component per intent, and k-means components for the unlabelled rows."""
        data = np.ascontiguousarray(real.vectors, np.float32)
        groups = [
            np.flatnonzero(real.intents == i) for i in np.unique(real.intents[real.intents >= 0])
        ]
        unlabelled = np.flatnonzero(real.intents < 0)
        clusters = min(unlabelled_components, len(unlabelled) // max(2 * rank, 2))
        if clusters > 1:
            kmeans = faiss.Kmeans(data.shape[1], clusters, niter=25, seed=seed)
            kmeans.train(data[unlabelled])
            assignment = kmeans.index.search(data[unlabelled], 1)[1][:, 0]
            groups += [unlabelled[assignment == c] for c in range(clusters)]
        elif len(unlabelled) > 1:
            groups.append(unlabelled)
        groups = [rows for rows in groups if len(rows) > 1]
        fitted = [_low_rank_gaussian(data[rows].astype(np.float64), rank) for rows in groups]
        counts = np.array([len(rows) for rows in groups], np.float64)
        return cls(
            weights=counts / counts.sum(),
            means=np.stack([mean for mean, _, _ in fitted]).astype(np.float32),
            factors=np.stack([factor for _, factor, _ in fitted]).astype(np.float32),
            scales=np.stack([scale for _, _, scale in fitted]).astype(np.float32),
            intents=np.array([real.intents[rows[0]] for rows in groups], np.int32),
            domains=np.array([real.domains[rows[0]] for rows in groups], np.int32),
        )

    @property
    def dim(self) -> int:
        return self.means.shape[1]

    def describe(self) -> dict:
        labelled = self.intents >= 0
        return {
            "components": len(self.weights),
            "intent components": int(labelled.sum()),
            "unlabelled components": int((~labelled).sum()),
            "rank": self.factors.shape[2],
            "unlabelled weight": round(float(self.weights[~labelled].sum()), 4),
        }

    def draw(self, count: int, rng: np.random.Generator) -> LabelledVectors:
        """``count`` draws from ``rng``."""
        components = rng.choice(len(self.weights), size=count, p=self.weights)
        order = np.argsort(components, kind="stable")
        counts = np.bincount(components, minlength=len(self.weights))
        vectors = np.empty((count, self.dim), np.float32)
        start = 0
        for component in np.flatnonzero(counts):
            rows = order[start : start + counts[component]]
            start += counts[component]
            latent = rng.standard_normal((len(rows), self.factors.shape[2]), dtype=np.float32)
            noise = rng.standard_normal((len(rows), self.dim), dtype=np.float32)
            vectors[rows] = (
                self.means[component]
                + latent @ self.factors[component].T
                + noise * self.scales[component]
            )
        return LabelledVectors(vectors, self.intents[components], self.domains[components])

    def chunks(self, count: int, seed: int, chunk: int) -> Iterator[LabelledVectors]:
        """``count`` draws in chunks of ``chunk`` rows; chunk ``i`` depends only on
        ``(seed, i)``."""
        for index, start in enumerate(range(0, count, chunk)):
            yield self.draw(min(chunk, count - start), np.random.default_rng([seed, index]))

    def sample(self, count: int, seed: int, chunk: int = 100_000) -> LabelledVectors:
        """``count`` draws at once (small counts: the chunks concatenated)."""
        parts = list(self.chunks(count, seed, chunk))
        return LabelledVectors(
            np.concatenate([part.vectors for part in parts]),
            np.concatenate([part.intents for part in parts]),
            np.concatenate([part.domains for part in parts]),
        )


def _low_rank_gaussian(rows: np.ndarray, rank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, ``(dim, rank)`` factor and diagonal standard deviations of a Gaussian whose
    covariance is the top-``rank`` part of the rows' sample covariance plus, on the diagonal,
    each coordinate's remaining variance."""
    mean = rows.mean(axis=0)
    residuals = rows - mean
    used = min(rank, len(rows) - 1)
    _, singular, directions = np.linalg.svd(residuals, full_matrices=False)
    factor = np.zeros((rows.shape[1], rank))
    factor[:, :used] = directions[:used].T * (singular[:used] / np.sqrt(len(rows) - 1))
    variance = residuals.var(axis=0, ddof=1) - (factor**2).sum(axis=1)
    floor = 1e-6 * max(float(residuals.var(axis=0, ddof=1).mean()), 1e-12)
    return mean, factor, np.sqrt(np.maximum(variance, floor))
