"""Index snapshots on disk: FAISS files plus a manifest that says which store state they show;
:class:`Snapshotting` writes one of an open collection.

A snapshot directory holds ``manifest.json`` and the files it names. Writing never overwrites a
file the current manifest names: new index files get a fresh random prefix, are flushed to disk,
and only then does a new manifest replace the old one (``os.replace``, atomic). A crash at any
point leaves either the old snapshot or the new one, never a mix; a write that fails (a full
disk: :class:`index.backend.StorageFull`) removes what it wrote and leaves the old one in use.

The manifest records the store's id and the change counter the indexes reflect, and for each
index its configuration and the sha256 of each of its files. :func:`load_snapshot` uses an index
only when all of these still match; anything else is reported as a problem so that the caller
rebuilds that index from the store. The ids of the rows the indexes hold
(:mod:`index.embedded.row_names`) are saved beside them, at the same counter, with their own
sha256; a snapshot without them, or with damaged ones, leaves the caller to read them from the
store.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from index.backend import StorageFull
from index.embedded.row_names import RowNames
from index.embedded.state import CollectionState
from index.embedded.store import Store
from index.faiss_indexes import VectorIndex

MANIFEST = "manifest.json"
FORMAT = 1
NAMES_FILE = "row-names.npz"


@dataclass
class LoadedSnapshot:
    """The indexes that could be used, the counter they reflect, and why others could not."""

    counter: int = 0
    indexes: dict[str, VectorIndex] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    names: RowNames | None = None
    """The ids of the rows the indexes held at ``counter``; None where none could be read."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fsync_path(path: Path) -> None:
    """Flush a file's or a directory's entry to disk (a rename is durable once its directory
    is fsynced)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_snapshot(
    directory: Path,
    counter: int,
    store_id: str,
    entries: Mapping[str, tuple[dict, VectorIndex]],
    names: RowNames,
) -> None:
    """Write every index (by name, with its configuration) and the ids of the rows they hold
    as the snapshot at ``counter``.

    The caller guarantees that neither changes while this runs.
    """
    directory.mkdir(parents=True, exist_ok=True)
    prefix = uuid.uuid4().hex[:12]
    manifest: dict = {"format": FORMAT, "counter": counter, "store_id": store_id, "indexes": {}}
    try:
        for name, (config, index) in entries.items():
            files = index.save(directory / f"{prefix}-{name}.faiss")
            for path in files:
                fsync_path(path)
            manifest["indexes"][name] = {
                "config": config,
                "index_file": files[0].name,
                "sha256": {path.name: _sha256(path) for path in files},
            }
        names_path = names.save(directory / f"{prefix}-{NAMES_FILE}")
        fsync_path(names_path)
        manifest["row_names"] = {"file": names_path.name, "sha256": _sha256(names_path)}
        pending = directory / f"{prefix}.manifest.tmp"
        pending.write_text(json.dumps(manifest, indent=2))
        fsync_path(pending)
    except (OSError, RuntimeError) as exc:  # FAISS reports a failed write as a RuntimeError
        for path in directory.glob(f"{prefix}*"):  # the old snapshot stays whole and in use
            path.unlink()
        if os.strerror(errno.ENOSPC) in str(exc):
            raise StorageFull(directory, exc) from exc
        raise
    os.replace(pending, directory / MANIFEST)
    fsync_path(directory)
    kept = {MANIFEST, names_path.name}
    kept |= {name for entry in manifest["indexes"].values() for name in entry["sha256"]}
    for path in directory.iterdir():
        if path.name not in kept:
            path.unlink()


def load_snapshot(
    directory: Path,
    store: Store,
    configs: Mapping[str, dict],
    open_index: Callable[[str, Path], VectorIndex],
) -> LoadedSnapshot:
    """Load each index named in ``configs`` that the snapshot holds intact and up to date with
    ``configs``; ``open_index(name, path)`` reads one file (and raises on a bad one)."""
    path = directory / MANIFEST
    if not path.exists():
        return LoadedSnapshot(problems={name: "no snapshot" for name in configs})
    try:
        manifest = json.loads(path.read_text())
        counter = int(manifest["counter"])
        if manifest["format"] != FORMAT or manifest["store_id"] != store.store_id:
            raise ValueError("the snapshot was written for another store or format")
        if not store.pruned_through <= counter <= store.counter:
            raise ValueError(
                f"snapshot counter {counter} is outside what the store can catch up from "
                f"({store.pruned_through}..{store.counter})"
            )
        entries = dict(manifest["indexes"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return LoadedSnapshot(problems={name: f"unusable manifest: {exc}" for name in configs})
    loaded = LoadedSnapshot(counter=counter)
    for name, config in configs.items():
        entry = entries.get(name)
        if entry is None:
            loaded.problems[name] = "not in the snapshot"
            continue
        if entry.get("config") != config:
            loaded.problems[name] = "parameters changed since the snapshot"
            continue
        try:
            for file_name, digest in entry["sha256"].items():
                if _sha256(directory / file_name) != digest:
                    raise ValueError(f"{file_name} does not match its checksum")
            loaded.indexes[name] = open_index(name, directory / entry["index_file"])
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            loaded.problems[name] = f"unreadable: {exc}"
    loaded.names = _load_names(directory, manifest.get("row_names"))
    return loaded


def _load_names(directory: Path, entry: object) -> RowNames | None:
    """The row names a manifest's ``row_names`` entry names, if present and intact."""
    if not isinstance(entry, dict):
        return None
    try:
        path = directory / entry["file"]
        if _sha256(path) != entry["sha256"]:
            return None
        return RowNames.read(path)
    except (OSError, ValueError, KeyError, TypeError):
        return None


class Snapshotting(CollectionState):
    """Writes the collection's snapshot."""

    def snapshot(self) -> int:
        """Write every index to ``path/snapshot`` and return the change counter it reflects.

        Searches go on meanwhile; writes wait. The change log up to that counter is then pruned.
        """
        with self._writer:
            if self._applied is None:
                raise RuntimeError(
                    "an earlier write failed while updating the indexes, so they match no state "
                    "of the store; reopen the collection to rebuild them"
                )
            self._swap_in_replacements(snapshot=True)
            entries = {
                name: (self._config(spec), self._indexes[name])
                for name, spec in self._specs.items()
            }
            write_snapshot(
                self.path / "snapshot", self._applied, self._store.store_id, entries, self._names
            )
            with self._lock.read():  # writes wait for the writer mutex; searches only read
                self._vectors.save(
                    self._applied, self._store.store_id, self._store.live_row_ids()
                )
            self._store.prune_changes(self._applied)
            for index in self._indexes.values():  # written: lean again until the next write
                index.seal(self._lock.write())
            return self._applied
