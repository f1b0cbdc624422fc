"""``fractal embed``: a corpus → Parquet shards of full vectors, with the bundle's ONNX encoder.

The corpus is read in shards of ``shard_size`` records, in order; a shard's texts are sorted by
token count and cut into batches of at most ``batch_tokens`` padded tokens
(:func:`encoding.length_batches.token_batches`), so that short texts are not padded to long ones.
Each shard is written atomically (:func:`bulk.shards.write_shard`) with the bundle's hash in it,
so a rerun skips every shard that is already there, valid, made by this bundle with this dtype,
and holds the same records; a missing, partial or stale one is redone. ``embed.json`` in the
output folder describes the finished run.

Who encodes the batches is the one thing that varies, behind :class:`Encoders`: by default
:class:`ProcessEncoders`, worker processes on this machine each running one
:class:`encoding.encoder.OnnxEncoder` on one intra-op thread; ``fractal embed --ray`` passes
:class:`bulk.ray_embed.RayEncoders`, Ray Data actors doing the same on a cluster. Everything
else (planning, resuming, checking, writing) is this module's, whichever encodes.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from multiprocessing.pool import Pool
from pathlib import Path
from typing import Protocol

import numpy as np
from tokenizers import Tokenizer
from tqdm.auto import tqdm

from bulk.corpus import Chunk, Columns, place, read_chunks
from bulk.errors import BulkError
from bulk.shards import DTYPES, FORMAT_VERSION, ShardHeader, read_shard, shard_name, write_shard
from bundle import TOKENIZER_FILE, BundleError, Manifest, load_bundle
from encoding.cores import available_cores
from encoding.encoder import OnnxEncoder
from encoding.length_batches import DEFAULT_BATCH_TOKENS, token_batches

RUN_FILE = "embed.json"
DEFAULT_SHARD_ROWS = 50_000


@dataclass(frozen=True)
class EmbedOptions:
    """How to embed: vector dtype, worker processes or Ray actors (0 = one per core, or per CPU
    of the Ray cluster), records per shard, padded tokens per encoder batch, which corpus
    columns, and whether to show progress."""

    dtype: str = "float16"
    workers: int = 0
    shard_size: int = DEFAULT_SHARD_ROWS
    batch_tokens: int = DEFAULT_BATCH_TOKENS
    columns: Columns = field(default_factory=Columns)
    progress: bool = True

    def check(self) -> None:
        if self.dtype not in DTYPES:
            raise BulkError(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        for name in ("shard_size", "batch_tokens"):
            if getattr(self, name) < 1:
                raise BulkError(f"--{name.replace('_', '-')} must be at least 1")
        if self.workers < 0:
            raise BulkError("--workers must be 0 (one per core) or more")


@dataclass(frozen=True)
class EmbedSummary:
    """What a run did: records in the corpus, shard files, and how many were already done."""

    rows: int
    shards: list[str]
    skipped: int
    redone: int


Job = tuple[np.ndarray, list[str]]
"""One encoder batch: the positions of its texts in their shard, and the texts."""


class Encoders(Protocol):
    """Who encodes the batches of a shard: the one part of a run that :func:`embed_corpus`
    takes from its caller."""

    def encode(
        self, jobs: Sequence[Job], done: Callable[[int], object]
    ) -> Iterable[tuple[np.ndarray, np.ndarray]]:
        """Each job's positions with its full vectors (``float32``, one row per text, the
        encoder's output unchanged), in any order; ``done(n)`` after each job of ``n`` texts."""
        ...

    def close(self) -> None:
        """Release what :meth:`encode` started (processes, a cluster connection)."""
        ...


EncodersFactory = Callable[[Path, Manifest], Encoders]
"""Makes the :class:`Encoders` of a run from the bundle folder and its verified manifest."""


_worker_encoder: OnnxEncoder | None = None


def _start_worker(bundle_dir: Path, manifest: Manifest, batch_tokens: int) -> None:
    global _worker_encoder
    _worker_encoder = OnnxEncoder(bundle_dir, manifest, threads=1, batch_tokens=batch_tokens)


def _encode(job: Job) -> tuple[np.ndarray, np.ndarray]:
    positions, texts = job
    assert _worker_encoder is not None
    return positions, _worker_encoder.encode(texts).vectors


class ProcessEncoders:
    """:class:`Encoders` on this machine: a pool of ``processes`` worker processes, each with
    one ONNX session on one intra-op thread, started on first use. ``batch_tokens`` is the
    workers' encoder budget: the run's, so that they run each job whole."""

    def __init__(
        self,
        bundle_dir: Path,
        manifest: Manifest,
        processes: int,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
    ) -> None:
        self._arguments = (bundle_dir, manifest, batch_tokens)
        self._processes = processes
        self._pool: Pool | None = None

    def encode(
        self, jobs: Sequence[Job], done: Callable[[int], object]
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        if self._pool is None:
            context = multiprocessing.get_context("spawn")
            self._pool = context.Pool(
                self._processes, initializer=_start_worker, initargs=self._arguments
            )
        results = []
        for positions, vectors in self._pool.imap_unordered(_encode, jobs):
            results.append((positions, vectors))
            done(len(positions))
        return results

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()


def _finished(path: Path, header: ShardHeader, chunk: Chunk, manifest: Manifest) -> str | None:
    """None when ``path`` is a valid shard of exactly this header and these records; else why
    it must be (re)done."""
    if not path.exists():
        return "missing"
    try:
        shard = read_shard(path, manifest)
    except BulkError as exc:
        return str(exc)
    if shard.header != header:
        return "made with other settings"
    if (shard.ids, shard.texts, shard.metadata) != (chunk.ids, chunk.texts, chunk.metadata):
        return "holds other records"
    return None


def _write_run_file(out_dir: Path, run: dict) -> None:
    temporary = out_dir / f".{RUN_FILE}.tmp-{os.getpid()}"
    temporary.write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, out_dir / RUN_FILE)


def embed_corpus(
    corpus: Path,
    bundle_dir: Path,
    out_dir: Path,
    options: EmbedOptions | None = None,
    encoders: EncodersFactory | None = None,
) -> EmbedSummary:
    """Embed every record of ``corpus`` into shards in ``out_dir``; see the module docstring.

    ``encoders`` makes who encodes the batches (default: :class:`ProcessEncoders` with
    ``options.workers`` processes, one per core when 0); it is closed at the end.
    """
    options = options or EmbedOptions()
    options.check()
    if encoders is None:
        encoders = partial(
            ProcessEncoders,
            processes=options.workers or available_cores(),
            batch_tokens=options.batch_tokens,
        )
    try:
        manifest = load_bundle(bundle_dir)
    except BundleError as exc:
        raise BulkError(str(exc)) from exc
    tokenizer = Tokenizer.from_file(str(bundle_dir / TOKENIZER_FILE))
    tokenizer.no_padding()
    out_dir.mkdir(parents=True, exist_ok=True)
    encoding = encoders(bundle_dir, manifest)
    shards: list[dict] = []
    skipped = redone = rows = 0
    bar = tqdm(desc="embed", unit="doc", disable=not options.progress)
    try:
        for number, chunk in enumerate(read_chunks(corpus, options.columns, options.shard_size)):
            path = out_dir / shard_name(number)
            header = ShardHeader(
                manifest.name,
                manifest.content_hash,
                manifest.dim,
                options.dtype,
                chunk.start,
                len(chunk),
            )
            shards.append({"file": path.name, "start": chunk.start, "rows": len(chunk)})
            rows += len(chunk)
            reason = _finished(path, header, chunk, manifest)
            if reason is None:
                skipped += 1
                bar.update(len(chunk))
                continue
            if reason != "missing":
                redone += 1
                bar.write(f"redoing {path.name}: {reason}", file=sys.stderr)
            vectors = _embed_chunk(chunk, manifest.dim, tokenizer, encoding, options, bar.update)
            _check_finite(corpus, chunk, vectors, options.dtype)
            write_shard(path, header, chunk.ids, chunk.texts, chunk.metadata, vectors)
    finally:
        bar.close()
        encoding.close()
    _write_run_file(
        out_dir,
        {
            "format_version": FORMAT_VERSION,
            "corpus": str(corpus.resolve()),
            "rows": rows,
            "bundle": {"name": manifest.name, "hash": manifest.content_hash, "dim": manifest.dim},
            "dtype": options.dtype,
            "shards": shards,
        },
    )
    return EmbedSummary(rows, [shard["file"] for shard in shards], skipped, redone)


def _embed_chunk(
    chunk: Chunk,
    dim: int,
    tokenizer: Tokenizer,
    encoding: Encoders,
    options: EmbedOptions,
    done: Callable[[int], object],
) -> np.ndarray:
    """The chunk's full vectors in its order, cast to ``options.dtype``."""
    lengths = np.array([len(e.ids) for e in tokenizer.encode_batch(chunk.texts)], np.int64)
    jobs = [
        (positions, [chunk.texts[p] for p in positions])
        for positions in token_batches(lengths, options.batch_tokens)
    ]
    vectors = np.empty((len(chunk), dim), np.float32)
    for positions, batch in encoding.encode(jobs, done):
        vectors[positions] = batch
    return vectors.astype(options.dtype)


def _check_finite(corpus: Path, chunk: Chunk, vectors: np.ndarray, dtype: str) -> None:
    finite = np.isfinite(vectors).all(axis=1)
    if not finite.all():
        row = chunk.rows[int(np.flatnonzero(~finite)[0])]
        hint = "; use --dtype float32" if dtype == "float16" else ""
        raise BulkError(f"{place(corpus, row)}: the vector holds NaN or inf in {dtype}{hint}")
