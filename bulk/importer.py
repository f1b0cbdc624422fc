"""``fractal import``: shards of precomputed vectors → the service's collection, no re-encoding.

The default collection is opened exactly as the service opens it (:func:`index.catalog.catalog_for`,
with the service's settings: ``FRACTAL_INDEX_BACKEND``, ``FRACTAL_INDEX_KINDS``, ``FRACTAL_HNSW_*``
and the rest apply, and the indexes go at the coarse prefix, the bundle's C2F shortlist prefix and
the fine one), so the service then serves it as it is. Those variables are read and checked by
:class:`index.settings.StorageSettings`, the one place that defines them, which the service's
settings extend. Each shard is read and checked
whole (:func:`bulk.shards.read_shard`) before anything of it is written, then added with one upsert.
On the embedded backend that is one SQLite transaction, so a shard is imported all or nothing, also
when the process is killed, and at the end the indexes are snapshotted, so the service starts
without rebuilding them. On Milvus a shard goes in acknowledged chunks
(:data:`index.milvus.params.UPSERT_CHUNK`); a shard cut short is completed by importing it again,
since upserts replace by id.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from bulk.embed import RUN_FILE
from bulk.errors import BulkError
from bulk.shards import read_shard
from bundle import BundleError, load_bundle
from index.backend import BackendUnavailable, DocumentRefused
from index.catalog import IndexDirError, catalog_for
from index.settings import StorageSettings, describe_settings_error


@dataclass(frozen=True)
class ImportedShard:
    """One shard added to the collection, and how long its upsert took (indexes included)."""

    path: Path
    documents: int
    seconds: float


def shard_paths(source: Path) -> list[Path]:
    """The shards to import: ``source`` itself if it is a file; the shards ``embed.json``
    lists, if the folder has one; else every ``*.parquet`` in the folder, by name."""
    if source.is_file():
        return [source]
    if not source.is_dir():
        raise BulkError(f"{source}: no such shard file or folder")
    run_file = source / RUN_FILE
    if run_file.is_file():
        try:
            run = json.loads(run_file.read_text(encoding="utf-8"))
            paths = [source / shard["file"] for shard in run["shards"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BulkError(f"{run_file}: unreadable ({exc!r})") from None
    else:
        paths = sorted(source.glob("*.parquet"))
    if not paths:
        raise BulkError(f"{source}: no shards (*.parquet) to import")
    return paths


def import_shards(
    source: Path,
    bundle_dir: Path,
    index_dir: Path,
    done: Callable[[ImportedShard], object] = lambda shard: None,
) -> list[ImportedShard]:
    """Add every shard of ``source`` to the collection in ``index_dir``, in order, calling
    ``done`` after each. A bad shard ends the import with a :class:`BulkError`; the shards
    before it stay imported (and snapshotted), nothing of it is."""
    try:
        manifest = load_bundle(bundle_dir)
        settings = StorageSettings(bundle_dir=bundle_dir, index_dir=index_dir)
    except BundleError as exc:
        raise BulkError(str(exc)) from exc
    except ValidationError as exc:
        raise BulkError(describe_settings_error(exc)) from None
    paths = shard_paths(source)
    try:
        catalog = catalog_for(settings, manifest)
        collection = catalog.open_default()
    except IndexDirError as exc:
        raise BulkError(str(exc)) from exc
    imported: list[ImportedShard] = []
    try:
        for path in paths:
            shard = read_shard(path, manifest)
            started = time.perf_counter()
            try:
                collection.upsert(shard.ids, shard.texts, shard.vectors, shard.metadata)
            except DocumentRefused as refused:
                raise BulkError(
                    f"{path}: document {shard.ids[refused.position]!r}: {refused}"
                ) from None
            except BackendUnavailable as exc:
                raise BulkError(f"{path}: {exc}; import it again to complete it") from None
            imported.append(ImportedShard(path, len(shard.ids), time.perf_counter() - started))
            done(imported[-1])
        collection.snapshot()
    except BulkError:
        if imported:
            collection.snapshot()
        raise
    finally:
        collection.close()
        catalog.close()
    return imported
