"""``fractal ingest FILE``: a user's corpus → a running service, through ``POST /documents``.

The corpus is read by :func:`bulk.corpus.read_rows` (JSONL, CSV/TSV or Parquet; an id column is
required) and sent in windows of whole batches, through the shared
:class:`~client.FractalClient` (batched, ``concurrency`` batches in flight, 429 retried
after ``Retry-After``). Every row ends in exactly one of three counts:

- **stored**: acknowledged by the service (committed to its store before the answer);
- **skipped** (``resume``): already stored, as ``POST /documents/lookup`` says, so not sent;
- **rejected**, with its line (Parquet: row) and reason: a row the reader cannot use (not JSON,
  not an object, a missing or empty id or text, metadata that is not an object…); a later row
  with an id an earlier row of the file has (the first one wins); a row whose request body JSON
  cannot carry (NaN or infinity in the metadata, a lone surrogate); and a row the service
  refuses with 422, found by narrowing the refused batch down (see :mod:`client`) while
  the rest of the batch is stored.

An interrupted run loses nothing acknowledged; rerunning it with ``resume`` sends only the rows
that are not stored yet (those of the batch in flight at the interruption may be either).

A named collection must exist before its ingest, or be created for it
(:func:`prepare_collection`, ``--create``) through ``POST /collections``: the service applies its
defaults and its rules, none of which is copied here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import chain, islice
from pathlib import Path

from tqdm.auto import tqdm

from bulk.corpus import BadRow, Columns, Record, corpus_format, read_rows, row_unit
from bulk.errors import BulkError
from client import LOOKUP_BATCH, FractalClient, RequestRefused

INGEST_FORMATS = ("jsonl", "csv", "tsv", "parquet")


@dataclass(frozen=True)
class IngestOptions:
    """Which columns, documents per request, requests in flight, whether to skip what is
    stored, and whether to show a progress bar."""

    columns: Columns = field(default_factory=lambda: Columns(id="id"))
    batch_size: int = 128
    concurrency: int = 1
    resume: bool = False
    progress: bool = True


@dataclass(frozen=True)
class Rejection:
    """A row that was not stored: its line (Parquet: row), its id when known, and why."""

    row: int
    id: str | None
    reason: str


@dataclass
class IngestSummary:
    """What a run did with every row of the corpus; ``unit`` is ``line`` or ``row``."""

    unit: str
    stored: int = 0
    skipped: int = 0
    rejected: list[Rejection] = field(default_factory=list)


def open_corpus(path: Path, columns: Columns) -> Iterator[Record | BadRow]:
    """The corpus's rows, after the checks that need no service: a readable file of a format
    ingest takes, whose first row or header has the named columns, and at least one row."""
    kind = corpus_format(path)
    if kind not in INGEST_FORMATS:
        raise BulkError(f"{path}: fractal ingest reads .jsonl, .csv, .tsv or .parquet files")
    if not path.exists():
        raise BulkError(f"{path}: no such file")
    if not path.is_file():
        raise BulkError(f"{path}: not a file")
    rows = read_rows(path, columns)
    first = next(rows, None)
    if first is None:
        raise BulkError(f"{path}: the corpus holds no documents")
    return chain([first], rows)


def prepare_collection(
    client: FractalClient, name: str, create: bool, index_kinds: list[str] | None
) -> list[str] | None:
    """Make sure the service has the collection ``name`` to ingest into; the index kinds of the
    collection created, or None when it existed.

    An existing collection is used as it is: ``index_kinds``, when given, must be its kinds. A
    missing one is created when ``create`` is set (with ``index_kinds``, or without any: the
    service's default, ``FRACTAL_INDEX_KINDS``), and is a :class:`BulkError` otherwise, as is a
    creation the service refuses (its message says why). Another client creating the same
    collection meanwhile is not an error. ``RequestRefused`` if the service refuses to list its
    collections."""
    url = str(client.http.base_url).rstrip("/")
    kinds_of = {collection.name: collection.index_kinds for collection in client.collections()}
    existing = kinds_of.get(name)
    if existing is not None:
        if index_kinds is not None and index_kinds != existing:
            raise BulkError(
                f"the collection {name!r} of the service at {url} exists with the index kinds "
                f"{','.join(existing)}, not {','.join(index_kinds)}: leave out --index-kinds to "
                "ingest into it"
            )
        return None
    if not create:
        raise BulkError(
            f"the service at {url} has no collection {name!r} (it has {', '.join(kinds_of)}): "
            "add --create to create it, or create it with POST /collections"
        )
    try:
        created = client.create_collection(name, index_kinds=index_kinds)
    except RequestRefused as refused:
        if refused.status_code == 409:  # created meanwhile, by another client
            return prepare_collection(client, name, False, index_kinds)
        raise BulkError(
            f"the service at {url} cannot create the collection {name!r}: {refused.message}"
        ) from None
    return created.index_kinds


def _unsendable(document: dict) -> str | None:
    """Why the document cannot travel in a JSON request body, or None."""
    try:
        json.dumps(document, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return "holds a lone surrogate, which is not valid Unicode"
    except ValueError:
        return "the metadata holds NaN or infinity, which JSON cannot carry"
    return None


def ingest_corpus(
    path: Path,
    rows: Iterator[Record | BadRow],
    client: FractalClient,
    options: IngestOptions,
    on_reject: Callable[[Rejection], None],
) -> IngestSummary:
    """Send ``rows`` (from :func:`open_corpus`) to the service; ``on_reject`` is called for
    every rejected row as it is found. See the module docstring."""
    summary = IngestSummary(row_unit(path))
    in_flight = options.batch_size * options.concurrency
    window = in_flight * max(1, LOOKUP_BATCH // in_flight)
    first_row: dict[str, int] = {}

    def reject(row: int, doc_id: str | None, reason: str) -> None:
        rejection = Rejection(row, doc_id, reason)
        summary.rejected.append(rejection)
        on_reject(rejection)

    with tqdm(desc="ingest", unit="doc", disable=not options.progress) as bar:
        while part := list(islice(rows, window)):
            records: list[Record] = []
            for item in part:
                if isinstance(item, BadRow):
                    reject(item.row, item.id, item.reason)
                elif item.id in first_row:
                    reason = f"id {item.id!r} repeats {summary.unit} {first_row[item.id]}"
                    reject(item.row, item.id, reason)
                else:
                    first_row[item.id] = item.row
                    records.append(item)
            bar.update(len(part) - len(records))
            if options.resume and records:
                stored = client.lookup([record.id for record in records])
                summary.skipped += len(stored)
                bar.update(len(stored))
                records = [record for record in records if record.id not in stored]
            documents: list[dict] = []
            sent: list[Record] = []
            for record in records:
                document = {"id": record.id, "text": record.text, "metadata": record.metadata}
                problem = _unsendable(document)
                if problem is None:
                    documents.append(document)
                    sent.append(record)
                else:
                    reject(record.row, record.id, problem)
                    bar.update(1)

            def refused(position: int, message: str, sent: list[Record] = sent) -> None:
                reject(sent[position].row, sent[position].id, f"the service refused it: {message}")

            ids = client.add_documents(
                documents,
                batch_size=options.batch_size,
                concurrency=options.concurrency,
                progress=bar.update,
                on_reject=refused,
            )
            summary.stored += len(ids)
    summary.rejected.sort(key=lambda rejection: rejection.row)
    return summary
