"""``fractal tune INDEX_DIR --bundle B``: C2F's efSearch and shortlist factor measured on an
embedded collection as it is served, at its own size (:mod:`index.search_tuning`).

The collection (the default one, or ``--collection NAME``) is opened as the service opens it,
with the service's settings, so the service must not hold the folder meanwhile. The queries are
the texts of ``--queries FILE`` (one per line, encoded with the bundle), or ``--sample`` stored
documents drawn at random. The sweep's table and the choice per recall floor are printed, and
the record is written into the collection's folder; the service applies it with
``FRACTAL_C2F_TUNING=index``. A folder without the collection, a collection without a graph at
the shortlist prefix, or an empty queries file is bad input: one ``error:`` line, status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bulk.errors import BulkError

if TYPE_CHECKING:  # the heavy imports wait until the command runs
    from bundle import Manifest
    from index.catalog import Catalog
    from index.embedded import Collection
    from index.search_tuning import SearchTuning

DEFAULT_SAMPLE = 1000


def _queries(path: Path) -> list[str]:
    try:
        texts = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    except (OSError, UnicodeDecodeError) as exc:
        raise BulkError(f"{path}: cannot read the queries ({exc})") from None
    texts = [text for text in texts if text]
    if not texts:
        raise BulkError(f"{path}: no queries (one text per line)")
    return texts


def _cmd_tune(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from bundle import BundleError, load_bundle
    from index.catalog import IndexDirError, catalog_for
    from index.search_tuning import write_tuning
    from index.settings import StorageSettings, describe_settings_error

    if args.sample < 1:
        raise BulkError(f"--sample must be at least 1, got {args.sample}")
    texts = _queries(args.queries) if args.queries is not None else None
    try:
        manifest = load_bundle(args.bundle)
        settings = StorageSettings(bundle_dir=args.bundle, index_dir=args.index_dir)
    except BundleError as exc:
        raise BulkError(str(exc)) from exc
    except ValidationError as exc:
        raise BulkError(describe_settings_error(exc)) from None
    if settings.index_backend != "embedded":
        raise BulkError("fractal tune measures an embedded index folder (FRACTAL_INDEX_BACKEND)")
    if not args.index_dir.is_dir():
        raise BulkError(f"{args.index_dir}: no such index folder")
    shortlist_dim = settings.shortlist_dim(manifest)
    try:
        catalog = catalog_for(settings, manifest)
    except IndexDirError as exc:
        raise BulkError(str(exc)) from exc
    try:
        collection = _open(catalog, args)
        try:
            tuning = _measure(collection, manifest, shortlist_dim, texts, args)
            path = write_tuning(collection.path, tuning)
        finally:
            collection.close()
    except IndexDirError as exc:
        raise BulkError(str(exc)) from exc
    finally:
        catalog.close()
    print("\n".join(tuning.markdown()))
    print(f"\nrecorded in {path}; the service applies it with FRACTAL_C2F_TUNING=index")
    return 0


def _open(catalog: Catalog, args: argparse.Namespace) -> Collection:
    """The default collection, or ``--collection``, as the service opens it."""
    from index.embedded import Collection as Embedded

    if args.collection is None:
        collection = catalog.open_default()
    else:
        kinds = catalog.lookup(args.collection)
        if kinds is None:
            raise BulkError(f"{args.index_dir}: no collection {args.collection!r}")
        collection = catalog.open(args.collection, kinds)
    assert isinstance(collection, Embedded)  # the embedded backend's
    return collection


def _measure(
    collection: Collection,
    manifest: Manifest,
    shortlist_dim: int,
    texts: list[str] | None,
    args: argparse.Namespace,
) -> SearchTuning:
    """The sweep with the given texts encoded, or with stored documents drawn at random."""
    from tqdm.auto import tqdm

    from encoding.cores import available_cores
    from encoding.encoder import OnnxEncoder
    from index.search_tuning import EF_VALUES, FACTORS, measure_search_tuning

    ids: list[str] | None = None
    if texts is None:
        ids, queries = collection.sample_vectors(args.sample, args.seed)
        if not ids:
            raise BulkError(f"{args.index_dir}: the collection holds no documents")
    else:
        encoder = OnnxEncoder(args.bundle, manifest, threads=available_cores())
        queries = encoder.encode(texts).vectors
    with tqdm(
        total=len(EF_VALUES) * len(FACTORS),
        desc="tune",
        unit="point",
        disable=args.no_progress,
        file=sys.stderr,
    ) as bar:
        try:
            return measure_search_tuning(
                collection,
                shortlist_dim,
                queries,
                ids,
                progress=lambda done: bar.update(done - bar.n),
            )
        except ValueError as exc:
            raise BulkError(str(exc)) from None


def add_tune_command(commands: argparse._SubParsersAction) -> None:
    """``fractal tune``: C2F's knobs measured on an index folder's collection."""
    tune = commands.add_parser(
        "tune",
        help="measure C2F's efSearch and shortlist factor on an index folder's collection",
    )
    tune.add_argument("index_dir", type=Path, help="FRACTAL_INDEX_DIR (embedded backend)")
    tune.add_argument("--bundle", type=Path, required=True, help="the bundle served")
    tune.add_argument("--collection", help="a named collection (default: the default one)")
    tune.add_argument(
        "--queries", type=Path, help="a file of query texts, one per line (default: --sample)"
    )
    tune.add_argument(
        "--sample",
        type=int,
        default=DEFAULT_SAMPLE,
        help=f"stored documents drawn as queries without --queries (default {DEFAULT_SAMPLE})",
    )
    tune.add_argument("--seed", type=int, default=0, help="the draw's seed")
    tune.add_argument("--no-progress", action="store_true")
    tune.set_defaults(handler=_cmd_tune)
