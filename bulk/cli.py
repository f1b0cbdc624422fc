"""The bulk tools' ``fractal`` commands, their options and handlers; ``fractal``'s parser
(:func:`training.cli.main`) adds them:

    fractal ingest corpus.jsonl --url http://127.0.0.1:8000 [--resume]  # a corpus → service
    fractal ingest news.jsonl --collection news --create   # … into a new named collection
    fractal ingest --url http://127.0.0.1:8000 --dataset clinc150   # demo corpus → service
    fractal embed corpus.jsonl --bundle bundles/identity --out shards/   # a corpus → Parquet
    fractal embed corpus.jsonl --bundle bundles/identity --out shards/ --ray  # … on Ray Data
    fractal import shards/ --bundle bundles/identity --index-dir fractal-index

A handler raises :class:`BulkError` for bad input, which ``fractal`` prints as one ``error:``
line with exit status 2. Like the rest of :mod:`bulk`, this module never imports torch, FastAPI
or ``training``: ``fractal ingest --dataset`` gets a named dataset's documents from the function
the trainer's CLI passes in (:data:`DatasetDocuments`). Each handler imports what its command
needs when it runs, so that ``fractal embed`` loads neither the service's HTTP stack nor Redis.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from bulk.errors import BulkError

if TYPE_CHECKING:
    from client import FractalClient

DatasetDocuments = Callable[[str, str, int | None], list[dict]]
"""``fractal ingest --dataset``'s source: a dataset name, its split (``train`` or ``test``) and
at most how many texts (None: all) → the documents to send (``id``, ``text``, ``metadata``)."""
DATASET_INGEST_OPTIONS = {"split": "--split", "max_texts": "--max-texts"}
FILE_INGEST_OPTIONS = {
    "id_column": "--id-column",
    "text_column": "--text-column",
    "metadata_columns": "--metadata-columns",
    "resume": "--resume",
    "rejects": "--rejects",
}


def name_list(text: str) -> list[str]:
    """A command-line list ``a,b``: its non-blank names."""
    return [part.strip() for part in text.split(",") if part.strip()]


def _cmd_ingest(args: argparse.Namespace, dataset_documents: DatasetDocuments) -> int | None:
    """Send a corpus FILE, or a dataset split (``--dataset``), to a running service."""
    if args.corpus is not None and args.dataset is not None:
        raise BulkError("give a corpus FILE or --dataset, not both")
    mode, others = (
        ("--dataset", FILE_INGEST_OPTIONS)
        if args.corpus is None
        else ("a corpus FILE", DATASET_INGEST_OPTIONS)
    )
    given = [flag for name, flag in others.items() if getattr(args, name) not in (None, False)]
    if given:
        raise BulkError(f"{', '.join(given)} cannot be used with {mode}")
    for name in ("batch_size", "concurrency"):
        if getattr(args, name) < 1:
            raise BulkError(f"--{name.replace('_', '-')} must be at least 1")
    if args.create and args.collection is None:
        raise BulkError("--create needs --collection (the default collection always exists)")
    if args.index_kinds is not None and not args.create:
        raise BulkError("--index-kinds applies to a collection --create makes: add --create")
    if args.index_kinds == []:
        raise BulkError("--index-kinds names no index kind")
    if args.corpus is None:
        _ingest_dataset(args, dataset_documents)
        return None
    return _ingest_file(args)


def _ready_client(args: argparse.Namespace) -> FractalClient:
    """A client of the service at ``--url`` once it is ready, whose limit on documents per
    request ``--batch-size`` respects, and which has the ``--collection`` (created with
    ``--create`` if need be, once everything else is checked)."""
    import httpx

    from bulk.ingest import prepare_collection
    from client import FractalClient, RequestRefused

    client = FractalClient(args.url, api_key=args.api_key, collection=args.collection)
    try:
        client.wait_ready(args.wait)
        info = client.info()
    except TimeoutError:
        client.close()
        waited = f"after {args.wait:g} s"
        raise BulkError(f"no ready Fractal service at {args.url} {waited}") from None
    except (RequestRefused, httpx.HTTPError) as exc:
        client.close()
        raise BulkError(f"cannot read /info of the service at {args.url}: {exc}") from None
    limit = info["limits"]["max_texts"]
    if args.batch_size > limit:
        client.close()
        raise BulkError(
            f"--batch-size {args.batch_size} is over the service's limit of {limit} documents "
            "per request (FRACTAL_MAX_TEXTS)"
        )
    if args.collection is not None:
        try:
            created = prepare_collection(client, args.collection, args.create, args.index_kinds)
        except (RequestRefused, httpx.HTTPError) as exc:
            client.close()
            problem = f"cannot list the collections of the service at {args.url}: {exc}"
            raise BulkError(problem) from None
        except BulkError:
            client.close()
            raise
        if created is not None:
            print(f"created the collection {args.collection!r} (index kinds {','.join(created)})")
    return client


def _ingest_dataset(args: argparse.Namespace, dataset_documents: DatasetDocuments) -> None:
    """Send a dataset split to a running service as documents (a demo corpus)."""
    from client import RequestRefused

    dataset, split = args.dataset or "clinc150", args.split or "train"
    documents = dataset_documents(dataset, split, args.max_texts)
    with _ready_client(args) as client:
        try:
            client.add_documents(
                documents,
                batch_size=args.batch_size,
                concurrency=args.concurrency,
                progress=not args.no_progress,
            )
        except RequestRefused as refused:
            raise BulkError(f"the service refused a batch: {refused}") from None
    print(f"ingested {len(documents)} {split} texts of {dataset} into {args.url}")


def _listed(numbers: list[int], most: int = 20) -> str:
    shown = ", ".join(f"{number:,}" for number in numbers[:most])
    return shown if len(numbers) <= most else f"{shown} and {len(numbers) - most:,} more"


def _ingest_file(args: argparse.Namespace) -> int:
    """A corpus file → the service (:mod:`bulk.ingest`); exit status 1 if a row was rejected."""
    import json

    import httpx
    from tqdm.auto import tqdm

    from bulk.corpus import Columns, place, row_unit
    from bulk.ingest import IngestOptions, ingest_corpus, open_corpus
    from client import RequestRefused

    columns = Columns(args.id_column or "id", args.text_column or "text", args.metadata_columns)
    options = IngestOptions(
        columns, args.batch_size, args.concurrency, args.resume, not args.no_progress
    )
    try:
        rows = open_corpus(args.corpus, columns)
        rejects = args.rejects.open("w", encoding="utf-8") if args.rejects else None
    except OSError as exc:
        raise BulkError(f"--rejects {args.rejects}: cannot write it ({exc})") from None
    unit = row_unit(args.corpus)

    def report(rejection) -> None:
        tqdm.write(f"{place(args.corpus, rejection.row)}: {rejection.reason}", file=sys.stderr)
        if rejects is not None:
            entry = {unit: rejection.row, "id": rejection.id, "reason": rejection.reason}
            rejects.write(json.dumps(entry, ensure_ascii=False) + "\n")
            rejects.flush()

    try:
        with _ready_client(args) as client:
            summary = ingest_corpus(args.corpus, rows, client, options, report)
    except (RequestRefused, httpx.HTTPError) as exc:
        raise BulkError(
            f"{exc}; what was acknowledged is stored: rerun with --resume to send the rest"
        ) from None
    finally:
        if rejects is not None:
            rejects.close()
    parts = [f"stored {summary.stored:,}"]
    if args.resume:
        parts.append(f"skipped {summary.skipped:,} already stored")
    rejected = [rejection.row for rejection in summary.rejected]
    parts.append(f"rejected {len(rejected):,}")
    line = ", ".join(parts)
    if rejected:
        line += f": {summary.unit}{'s' if len(rejected) > 1 else ''} {_listed(rejected)}"
    print(line)
    return 1 if rejected else 0


def _require_pyarrow() -> None:
    """``fractal embed`` and ``fractal import`` read and write Parquet: the ``bulk`` extra."""
    try:
        import pyarrow  # noqa: F401
    except ModuleNotFoundError:
        raise BulkError(
            "fractal embed and fractal import need pyarrow: pip install 'fractal[bulk]'"
        ) from None


def _require_ray() -> None:
    """``fractal embed --ray`` encodes on Ray Data: the ``scale`` extra."""
    try:
        import ray.data  # noqa: F401
    except ImportError:
        raise BulkError("--ray needs Ray Data: pip install 'fractal[scale]'") from None


def _cmd_embed(args: argparse.Namespace) -> None:
    """A corpus → Parquet shards of full vectors (:mod:`bulk.embed`; on Ray with ``--ray``,
    :mod:`bulk.ray_embed`)."""
    _require_pyarrow()
    if args.ray is not None:
        _require_ray()
    from bulk.corpus import Columns
    from bulk.embed import EmbedOptions, embed_corpus

    given = {
        "workers": args.workers,
        "shard_size": args.shard_size,
        "batch_tokens": args.batch_tokens,
    }
    options = EmbedOptions(
        dtype=args.dtype,
        columns=Columns(args.id_column, args.text_column, args.metadata_columns),
        progress=not args.no_progress,
        **{name: value for name, value in given.items() if value is not None},
    )
    encoders = None
    if args.ray is not None:
        from bulk.ray_embed import RayEncoders

        encoders = partial(
            RayEncoders,
            address=args.ray,
            actors=options.workers,
            batch_tokens=options.batch_tokens,
        )
    summary = embed_corpus(args.corpus, args.bundle, args.out, options, encoders)
    print(
        f"embedded {summary.rows} documents into {len(summary.shards)} shards in {args.out} "
        f"({summary.skipped} already done and skipped, {summary.redone} redone)"
    )


def _cmd_import(args: argparse.Namespace) -> None:
    """Parquet shards → the collection in an index dir, without re-encoding (:mod:`bulk`)."""
    _require_pyarrow()
    from bulk.importer import import_shards

    def done(shard) -> None:
        rate = shard.documents / max(shard.seconds, 1e-9)
        print(
            f"{shard.path}: imported {shard.documents} documents "
            f"({shard.seconds:.2f} s, {rate:.0f}/s)",
            flush=True,
        )

    imported = import_shards(args.shards, args.bundle, args.index_dir, done)
    total = sum(shard.documents for shard in imported)
    print(f"imported {total} documents from {len(imported)} shards into {args.index_dir}")


def add_ingest_command(
    commands: argparse._SubParsersAction, dataset_documents: DatasetDocuments
) -> None:
    """``fractal ingest``: a corpus file, or ``dataset_documents``'s, → a running service."""
    ingest = commands.add_parser(
        "ingest", help="send a corpus file (JSONL, CSV/TSV, Parquet) or a dataset to a service"
    )
    ingest.add_argument(
        "corpus", type=Path, nargs="?", help="a .jsonl, .csv, .tsv or .parquet file (or --dataset)"
    )
    ingest.add_argument("--url", default="http://127.0.0.1:8000")
    ingest.add_argument(
        "--collection", help="a named collection of the service (default: the default one)"
    )
    ingest.add_argument(
        "--create", action="store_true", help="create the --collection if the service has none"
    )
    ingest.add_argument(
        "--index-kinds",
        type=name_list,
        metavar="a,b",
        help="with --create: the index kinds the collection builds, some of exact, hnsw, pq "
        "(default: the service's FRACTAL_INDEX_KINDS)",
    )
    ingest.add_argument(
        "--api-key",
        default=os.environ.get("FRACTAL_API_KEY"),
        help="the service's API key (default: $FRACTAL_API_KEY)",
    )
    ingest.add_argument("--batch-size", type=int, default=128, help="documents per request")
    ingest.add_argument("--concurrency", type=int, default=1, help="requests in flight")
    ingest.add_argument("--wait", type=float, default=120, help="seconds to wait for /ready")
    ingest.add_argument("--no-progress", action="store_true")
    corpus = ingest.add_argument_group("a corpus FILE")
    corpus.add_argument("--id-column", help="default: id")
    corpus.add_argument("--text-column", help="default: text")
    corpus.add_argument(
        "--metadata-columns",
        type=name_list,
        help="a,b (default: every other column; a column named metadata holds an object)",
    )
    corpus.add_argument(
        "--resume", action="store_true", help="skip the ids the service already stores"
    )
    corpus.add_argument(
        "--rejects", type=Path, help="also write the rejected rows to this file, as JSONL"
    )
    dataset = ingest.add_argument_group("a dataset (a demo corpus)")
    dataset.add_argument("--dataset", help="clinc150, banking77, … (the default without FILE)")
    dataset.add_argument("--split", choices=("train", "test"), help="default: train")
    dataset.add_argument("--max-texts", type=int, help="subsample the split (default: all)")
    ingest.set_defaults(handler=partial(_cmd_ingest, dataset_documents=dataset_documents))


def add_embed_command(commands: argparse._SubParsersAction) -> None:
    """``fractal embed``: a corpus → Parquet shards, in worker processes or on Ray Data."""
    embed = commands.add_parser(
        "embed", help="embed a corpus (JSONL, CSV/TSV, Parquet, .txt lines) into Parquet shards"
    )
    embed.add_argument("corpus", type=Path)
    embed.add_argument("--bundle", type=Path, required=True, help="the bundle to embed with")
    embed.add_argument("--out", type=Path, required=True, help="folder for the shards")
    embed.add_argument("--dtype", choices=("float16", "float32"), default="float16")
    embed.add_argument(
        "--workers",
        type=int,
        help="encoder processes, or Ray actors (default: one per core, or per CPU of the cluster)",
    )
    embed.add_argument("--shard-size", type=int, help="documents per shard (default: 50000)")
    embed.add_argument("--batch-tokens", type=int, help="padded tokens per batch (default: 2048)")
    embed.add_argument("--id-column", help="default: id if present, else the row number")
    embed.add_argument("--text-column", default="text")
    embed.add_argument(
        "--metadata-columns", type=name_list, help="a,b (default: every other column)"
    )
    embed.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="encode with Ray Data actors: on a new local cluster, or on the cluster at ADDRESS "
        "(host:port, ray://host:10001, auto); needs the scale extra",
    )
    embed.add_argument("--no-progress", action="store_true")
    embed.set_defaults(handler=_cmd_embed)


def add_import_command(commands: argparse._SubParsersAction) -> None:
    """``fractal import``: shards → the collection the service opens."""
    bulk_import = commands.add_parser(
        "import", help="add shards from `fractal embed` to an index dir, without re-encoding"
    )
    bulk_import.add_argument("shards", type=Path, help="a shard folder or one shard file")
    bulk_import.add_argument("--bundle", type=Path, required=True, help="the bundle served")
    bulk_import.add_argument("--index-dir", type=Path, required=True, help="FRACTAL_INDEX_DIR")
    bulk_import.set_defaults(handler=_cmd_import)
