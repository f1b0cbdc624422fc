"""Named collections: each with its own store, indexes, snapshots and metrics label, all searched
with the one loaded bundle.

The **default** collection lives in ``FRACTAL_INDEX_DIR`` itself, as before collections existed,
and answers every route that names no collection (``/documents``, ``/search``); ``GET
/collections`` lists it as ``default``. A **named** collection lives in
``FRACTAL_INDEX_DIR/collections/NAME/`` with a ``collection.json`` record (its name and index
kinds). ``POST /collections`` creates one, every start reopens the ones on disk, and ``DELETE
/collections/NAME`` closes one and removes its folder.

A request holds its collection for as long as it uses it (:meth:`HostedCollection.use`); a
deletion first stops new requests from finding the collection, waits for those in flight, then
closes the store and removes the folder, so no search ever runs on a closed index.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bundle import Manifest
from index import Collection, CollectionStats
from index.kinds import KINDS
from service.collection import IndexDirError, open_collection
from service.errors import Conflict, InvalidRequest, NotFound
from service.granularity import GranularityRouter
from service.metrics import Metrics
from service.search import Searcher
from service.settings import Settings

logger = logging.getLogger("service")

DEFAULT_NAME = "default"
COLLECTIONS_DIR = "collections"
RECORD_FILE = "collection.json"
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
NAME_RULE = "1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or digit"
MAX_COLLECTIONS = 64


class HostedCollection:
    """One collection as the service serves it: the index collection, its searcher, whether it
    has writes not yet in a snapshot, and the requests using it."""

    def __init__(
        self, name: str, collection: Collection, searcher: Searcher, index_kinds: tuple[str, ...]
    ) -> None:
        self.name = name
        self.collection = collection
        self.searcher = searcher
        self.index_kinds = index_kinds
        # A start that rebuilt or caught up indexes snapshots like one that wrote.
        self._unsnapshotted_writes = collection.opened_with_work
        self._snapshot_lock = threading.Lock()
        self._users = 0
        self._closed = False
        self._condition = threading.Condition()

    @contextmanager
    def use(self) -> Iterator[HostedCollection]:
        """Hold the collection open while the block runs; 404 once a deletion has begun."""
        with self._condition:
            if self._closed:
                raise NotFound(f"no collection {self.name!r}", "collection")
            self._users += 1
        try:
            yield self
        finally:
            with self._condition:
                self._users -= 1
                self._condition.notify_all()

    def mark_written(self) -> None:
        self._unsnapshotted_writes = True

    def snapshot_if_changed(self) -> None:
        """Write an index snapshot if the collection changed since the last one.

        Serialised by a lock, so the snapshot at shutdown waits for a periodic one still
        running, and the store is closed only after both.
        """
        with self._snapshot_lock:
            if not self._unsnapshotted_writes or self._closed:
                return
            self._unsnapshotted_writes = False
            try:
                counter = self.collection.snapshot()
            except (OSError, RuntimeError):
                self._unsnapshotted_writes = True
                logger.exception(
                    "index snapshot of collection %r failed; the store is intact, a restart "
                    "rebuilds",
                    self.name,
                )
                return
            logger.info("collection %r: index snapshot written at change %d", self.name, counter)

    def close(self, *, snapshot: bool) -> None:
        """Refuse new users, wait for the current ones, snapshot if asked, close the store."""
        if snapshot:
            self.snapshot_if_changed()
        with self._condition:
            self._closed = True
            self._condition.wait_for(lambda: self._users == 0)
        with self._snapshot_lock:
            self.collection.close()

    def stats(self) -> CollectionStats:
        return self.collection.stats()


def check_name(name: str, param: str = "name") -> None:
    """A collection name: :data:`NAME_RULE`."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise InvalidRequest(f"collection name {name!r} is not valid: {NAME_RULE}", param)


def check_index_kinds(kinds: tuple[str, ...], param: str = "index_kinds") -> None:
    if not kinds or len(set(kinds)) != len(kinds) or not set(kinds) <= set(KINDS):
        raise InvalidRequest(
            f"index_kinds {list(kinds)} must list some of {', '.join(KINDS)}, each once", param
        )


class CollectionSet:
    """The default collection and the named ones, by name."""

    def __init__(
        self,
        settings: Settings,
        manifest: Manifest,
        router: GranularityRouter,
        metrics: Metrics,
    ) -> None:
        self._settings = settings
        self._manifest = manifest
        self._router = router
        self._metrics = metrics
        self._lock = threading.Lock()
        self.default = self._host(DEFAULT_NAME, settings, settings.index_kinds)
        self._named: dict[str, HostedCollection] = {}
        for record in sorted(self._root.glob(f"*/{RECORD_FILE}")):
            self._open_named(record)

    @property
    def _root(self) -> Path:
        return self._settings.index_dir / COLLECTIONS_DIR

    def _host(
        self, name: str, settings: Settings, index_kinds: tuple[str, ...]
    ) -> HostedCollection:
        collection = open_collection(settings, self._manifest)
        searcher = Searcher(collection, self._manifest, self._router, settings, self._metrics)
        return HostedCollection(name, collection, searcher, index_kinds)

    def _settings_for(self, name: str, index_kinds: tuple[str, ...]) -> Settings:
        """The service's settings with the collection's folder and index kinds (at every
        prefix)."""
        return self._settings.model_copy(
            update={
                "index_dir": self._root / name,
                "index_kinds": index_kinds,
                "fine_index_kinds": None,
            }
        )

    def _open_named(self, record_path: Path) -> None:
        try:
            record = json.loads(record_path.read_text(encoding="utf-8"))
            name, kinds = record["name"], tuple(record["index_kinds"])
            check_name(name)
            check_index_kinds(kinds)
        except (OSError, ValueError, KeyError, TypeError, InvalidRequest) as exc:
            raise IndexDirError(f"{record_path} is not a collection record: {exc}") from exc
        if record_path.parent.name != name:
            raise IndexDirError(f"{record_path} names collection {name!r}, not its folder's")
        self._named[name] = self._host(name, self._settings_for(name, kinds), kinds)

    def get(self, name: str | None) -> HostedCollection:
        """The collection called ``name`` (None or ``default``: the default one); 404 if none."""
        if name is None or name == DEFAULT_NAME:
            return self.default
        with self._lock:
            hosted = self._named.get(name)
        if hosted is None:
            raise NotFound(
                f"no collection {name!r}: create it with POST /collections", "collection"
            )
        return hosted

    def all(self) -> list[HostedCollection]:
        """The default collection, then the named ones by name."""
        with self._lock:
            return [self.default, *(self._named[name] for name in sorted(self._named))]

    def create(self, name: str, index_kinds: tuple[str, ...] | None) -> HostedCollection:
        """Create and open a named collection; 409 if the name is taken (``default`` is)."""
        check_name(name)
        kinds = tuple(index_kinds) if index_kinds is not None else self._settings.index_kinds
        check_index_kinds(kinds)
        built = set(self._settings.index_kinds) | set(self._settings.fine_index_kinds or ())
        if not set(kinds) <= built:
            raise InvalidRequest(
                f"index_kinds {list(kinds)}: a collection builds some of the kinds the service "
                f"builds ({', '.join(sorted(built))}; FRACTAL_INDEX_KINDS)",
                "index_kinds",
            )
        with self._lock:
            if name == DEFAULT_NAME or name in self._named:
                raise Conflict(f"collection {name!r} already exists", "name")
            if len(self._named) >= MAX_COLLECTIONS:
                raise InvalidRequest(
                    f"the service holds {MAX_COLLECTIONS} collections, its limit; delete one first",
                    "name",
                )
            folder = self._root / name
            if folder.exists():  # left over from a deletion cut short: it held nothing acked
                shutil.rmtree(folder)
            folder.mkdir(parents=True)
            try:
                hosted = self._host(name, self._settings_for(name, kinds), kinds)
            except IndexDirError:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            # The record is written last: a folder without one is not a collection.
            record = {"name": name, "index_kinds": list(kinds)}
            temporary = folder / f".{RECORD_FILE}.{uuid.uuid4().hex}"
            temporary.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
            temporary.replace(folder / RECORD_FILE)
            self._named[name] = hosted
        return hosted

    def delete(self, name: str) -> None:
        """Stop serving a named collection, wait for the requests using it, remove its folder."""
        if name == DEFAULT_NAME:
            raise NotFound(
                "no named collection 'default': the default collection cannot be deleted",
                "collection",
            )
        with self._lock:
            hosted = self._named.pop(name, None)
        if hosted is None:
            raise NotFound(f"no collection {name!r}", "collection")
        hosted.close(snapshot=False)
        folder = self._root / name
        # Unlinking the record first makes a crash mid-way leave no collection behind.
        (folder / RECORD_FILE).unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        """Snapshot what changed and close every collection (at shutdown)."""
        for hosted in self.all():
            hosted.close(snapshot=True)
