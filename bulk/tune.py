"""``fractal tune INDEX_DIR --bundle B``: C2F's efSearch and shortlist factor measured on an
embedded collection as it is served, at its own size (:mod:`index.search_tuning`).

The collection (the default one, or ``--collection NAME``) is opened as the service opens it,
with the service's settings, so the service must not hold the folder meanwhile. The queries are
the texts of ``--queries FILE`` (one per line, encoded with the bundle), or ``--sample`` stored
documents drawn at random. The sweep's table and the choice per recall floor are printed, and
the record is written into the collection's folder; the service applies it with
``FRACTAL_C2F_TUNING=index``. A folder without the collection, a collection without a graph at
the shortlist prefix, or an empty queries file is bad input: one ``error:`` line, status 2.

With ``--first-stages N`` it also measures every C2F first stage the export weighs (each trained
prefix in each code, degree 16 and 32: :func:`index.first_stage.measure_first_stage`) on N
stored documents drawn at random (the query documents left out) with the same queries: which
graph the collection's own documents favour, against the one served. That table is printed and
recorded beside the other (:data:`index.search_tuning.FIRST_STAGES_FILE`), and ``/info`` shows
its choice beside the first stage in use. With ``FRACTAL_FIRST_STAGE=index`` the service and
``fractal import`` serve that choice: the collection's graphs are rebuilt with its prefix, codes
and degree the next time it opens (then ``fractal tune`` again measures the new graph's
efSearch and factor).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bulk.errors import BulkError

if TYPE_CHECKING:  # the heavy imports wait until the command runs
    import numpy as np

    from bundle import Manifest
    from index.catalog import Catalog
    from index.embedded import Collection
    from index.first_stage import FirstStageMeasurement
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
    from index.search_tuning import FIRST_STAGES_FILE, write_record, write_tuning
    from index.settings import StorageSettings, describe_settings_error

    if args.sample < 1:
        raise BulkError(f"--sample must be at least 1, got {args.sample}")
    if args.first_stages < 0:
        raise BulkError(f"--first-stages must be 0 or more, got {args.first_stages}")
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
    try:
        catalog = catalog_for(settings, manifest)
    except IndexDirError as exc:
        raise BulkError(str(exc)) from exc
    first_stages: FirstStageMeasurement | None = None
    try:
        collection = _open(catalog, args)
        try:
            shortlist_dim = settings.shortlist_dim(manifest, collection.path)
            ids, queries = _queries_of(collection, manifest, texts, args)
            tuning = _measure(collection, shortlist_dim, ids, queries, args)
            path = write_tuning(collection.path, tuning)
            if args.first_stages:
                first_stages = _first_stages(collection, manifest, ids, queries, args)
                record = {"served": tuning.to_json()["graph"], **first_stages.to_json()}
                stages_path = write_record(collection.path / FIRST_STAGES_FILE, record)
        finally:
            collection.close()
    except IndexDirError as exc:
        raise BulkError(str(exc)) from exc
    finally:
        catalog.close()
    print("\n".join(tuning.markdown()))
    print(f"\nrecorded in {path}; the service applies it with FRACTAL_C2F_TUNING=index")
    if first_stages is not None:
        graph = tuning.graph
        print("\n" + "\n".join(first_stages.markdown()))
        print(
            f"\nServed: {graph.dim}-d {graph.storage} M{graph.m}. Recorded in {stages_path}; "
            "FRACTAL_FIRST_STAGE=index serves the choice (its graph is rebuilt when the "
            "collection opens; then run fractal tune again for its efSearch and factor)."
        )
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


def _queries_of(
    collection: Collection, manifest: Manifest, texts: list[str] | None, args: argparse.Namespace
) -> tuple[list[str] | None, np.ndarray]:
    """The given texts encoded (no ids), or stored documents drawn at random (their ids)."""
    from encoding.cores import available_cores
    from encoding.encoder import OnnxEncoder

    if texts is None:
        ids, queries = collection.sample_vectors(args.sample, args.seed)
        if not ids:
            raise BulkError(f"{args.index_dir}: the collection holds no documents")
        return ids, queries
    encoder = OnnxEncoder(args.bundle, manifest, threads=available_cores())
    return None, encoder.encode(texts).vectors


def _measure(
    collection: Collection,
    shortlist_dim: int,
    ids: list[str] | None,
    queries: np.ndarray,
    args: argparse.Namespace,
) -> SearchTuning:
    """The served graph's sweep with these queries (``ids``: the stored documents they are)."""
    from tqdm.auto import tqdm

    from index.search_tuning import EF_VALUES, FACTORS, measure_search_tuning

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


def _first_stages(
    collection: Collection,
    manifest: Manifest,
    ids: list[str] | None,
    queries: np.ndarray,
    args: argparse.Namespace,
) -> FirstStageMeasurement:
    """Every first stage measured on ``--first-stages`` stored documents drawn at random, the
    query documents (``ids``) left out, with ``queries``."""
    from tqdm.auto import tqdm

    from index.faiss_indexes import SQ_QUANTIZERS
    from index.first_stage import DEGREES, K, measure_first_stage

    own = set(ids or ())
    drawn, vectors = collection.sample_vectors(args.first_stages + len(own), args.seed + 1)
    kept = [row for row, doc_id in enumerate(drawn) if doc_id not in own][: args.first_stages]
    if len(kept) < K:
        raise BulkError(
            f"--first-stages: {len(kept)} documents besides the queries; at least {K} are needed"
        )
    candidates = len(manifest.prefix_dims) * len(SQ_QUANTIZERS) * len(DEGREES)
    with tqdm(
        total=candidates, desc="first stages", unit="graph", disable=args.no_progress,
        file=sys.stderr,
    ) as bar:  # fmt: skip
        return measure_first_stage(
            vectors[kept],
            queries,
            manifest.prefix_dims,
            packed_links=collection.hnsw.packed_links,  # as the collection serves its graphs
            progress=lambda done: bar.update(1),
        )


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
    tune.add_argument(
        "--first-stages",
        type=int,
        default=0,
        metavar="N",
        help="also measure every C2F first stage (prefix, codes, degree) on N stored documents "
        "drawn at random (default 0: not)",
    )
    tune.add_argument("--no-progress", action="store_true")
    tune.set_defaults(handler=_cmd_tune)
