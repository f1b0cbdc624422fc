"""Named collections: each with its own documents, indexes and metrics label, all searched with
the one loaded bundle.

The **default** collection answers every route that names no collection (``/documents``,
``/search``); ``GET /collections`` lists it as ``default``. ``POST /collections`` creates a
**named** one, every start reopens the existing ones, and ``DELETE /collections/NAME`` closes one
and removes its data. Where they live is the backend's catalog
(:func:`index.catalog.catalog_for`): folders of ``FRACTAL_INDEX_DIR``, or Milvus
collections shared with every other replica.

A request holds its collection for as long as it uses it (:meth:`HostedCollection.use`); a
deletion first stops new requests from finding the collection, waits for those in flight, then
closes it and removes its data, so no search ever runs on a closed index.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from bundle import Manifest
from index import CollectionStats
from index.backend import CollectionMissing, IndexBackend, StorageFull
from index.catalog import DEFAULT_NAME, IndexDirError, catalog_for
from index.faiss_indexes import KINDS
from service.errors import Conflict, InvalidRequest, NotFound
from service.granularity import GranularityRouter
from service.metrics import Metrics
from service.search import Searcher
from service.settings import Settings

logger = logging.getLogger("service")

NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
NAME_RULE = "1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or digit"
MAX_COLLECTIONS = 64


class HostedCollection:
    """One collection as the service serves it: the index collection, its searcher, whether it
    has writes not yet in a snapshot, and the requests using it."""

    def __init__(
        self,
        name: str,
        collection: IndexBackend,
        searcher: Searcher,
        index_kinds: tuple[str, ...],
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
        self.gone = False
        """The backend found the collection deleted (by another replica)."""
        self._condition = threading.Condition()

    @contextmanager
    def use(self) -> Iterator[HostedCollection]:
        """Hold the collection open while the block runs; 404 once a deletion has begun, or
        when the backend finds it gone (another replica deleted it)."""
        with self._condition:
            if self._closed:
                raise NotFound(f"no collection {self.name!r}", "collection")
            self._users += 1
        try:
            yield self
        except CollectionMissing:
            self.gone = True
            raise NotFound(f"no collection {self.name!r}", "collection") from None
        finally:
            with self._condition:
                self._users -= 1
                self._condition.notify_all()

    def mark_written(self) -> None:
        self._unsnapshotted_writes = True

    def snapshot_if_changed(self) -> float | None:
        """Write an index snapshot if the collection changed since the last one; the seconds
        it took, or None when none was written.

        Serialised by a lock, so the snapshot at shutdown waits for a periodic one still
        running, and the store is closed only after both.
        """
        with self._snapshot_lock:
            if not self._unsnapshotted_writes or self._closed:
                return None
            self._unsnapshotted_writes = False
            started = time.perf_counter()
            try:
                counter = self.collection.snapshot()
            except (OSError, RuntimeError) as exc:  # StorageFull (a full disk) among them
                self._unsnapshotted_writes = True
                logger.error(
                    "index snapshot of collection %r failed (%s); the store is intact, the next "
                    "snapshot tries again and a restart rebuilds",
                    self.name,
                    exc,
                    exc_info=not isinstance(exc, StorageFull),
                )
                return None
            seconds = time.perf_counter() - started
            logger.info(
                "collection %r: index snapshot written at change %d in %.2f s",
                self.name,
                counter,
                seconds,
            )
            return seconds

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


def _log_repairs(name: str, collection: IndexBackend) -> None:
    """A warning line for each derived file that opening found damaged or stale and rebuilt from
    the store (an index snapshot whose checksum differs, the full vectors' file); a missing
    snapshot (a new folder) is no news."""
    for repair in collection.stats().recovery.repairs():
        logger.warning("collection %r: %s", name, repair)


def check_name(name: str, param: str = "name") -> None:
    """A collection name: :data:`NAME_RULE`."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise InvalidRequest(f"collection name {name!r} is not valid: {NAME_RULE}", param)


def check_index_kinds(kinds: tuple[str, ...], param: str = "index_kinds") -> None:
    if not kinds or len(set(kinds)) != len(kinds) or not set(kinds) <= set(KINDS):
        raise InvalidRequest(
            f"index_kinds {list(kinds)} must list some of {', '.join(KINDS)}, each once", param
        )


def with_kinds(settings: Settings, index_kinds: tuple[str, ...]) -> Settings:
    """The settings with a named collection's index kinds (at every prefix), as its searcher
    reads them (:func:`index.catalog.with_kinds` is the catalog's side)."""
    return settings.model_copy(update={"index_kinds": index_kinds, "fine_index_kinds": None})


class CollectionSet:
    """The default collection and the named ones, by name, in the backend's catalog
    (:func:`index.catalog.catalog_for`).

    With a shared catalog (Milvus), other replicas create and delete collections too: a name
    this replica does not know is looked up in the catalog before it is a 404, listing
    collections lists the catalog's, and one found gone is forgotten.
    """

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
        self._catalog = catalog_for(settings, manifest, self._count_error)
        self.default = self._host(DEFAULT_NAME, self._catalog.open_default(), settings)
        self._named: dict[str, HostedCollection] = {}
        self._deleting: set[str] = set()  # being deleted here: never reopened from the catalog
        for name, kinds in self._catalog.named().items():
            self._open_named(name, kinds)

    def _count_error(self, operation: str) -> None:
        self._metrics.backend_errors.labels(
            backend=self._settings.index_backend, operation=operation
        ).inc()

    def _host(self, name: str, collection: IndexBackend, settings: Settings) -> HostedCollection:
        _log_repairs(name, collection)
        searcher = Searcher(collection, self._manifest, self._router, settings, self._metrics)
        return HostedCollection(name, collection, searcher, settings.index_kinds)

    def _open_named(self, name: str, kinds: tuple[str, ...]) -> HostedCollection:
        try:
            check_name(name)
            check_index_kinds(kinds)
        except InvalidRequest as exc:
            raise IndexDirError(f"collection {name!r} has an invalid record: {exc}") from exc
        hosted = self._host(
            name, self._catalog.open(name, kinds), with_kinds(self._settings, kinds)
        )
        self._named[name] = hosted
        return hosted

    @property
    def shared(self) -> bool:
        """Whether other replicas create and delete collections in the same backend (then
        :meth:`get` and :meth:`all` may ask it)."""
        return self._catalog.shared

    def problem(self) -> str | None:
        """None while the backend can serve, else why not (``/ready``)."""
        return self._catalog.problem()

    def get(self, name: str | None) -> HostedCollection:
        """The collection called ``name`` (None or ``default``: the default one); 404 if none."""
        if name is None or name == DEFAULT_NAME:
            return self.default
        with self._lock:
            hosted = self._named.get(name)
            if hosted is not None and hosted.gone:
                del self._named[name]
                hosted = None
            if hosted is None and self._catalog.shared and name not in self._deleting:
                kinds = self._catalog.lookup(name)
                if kinds is not None:
                    try:
                        hosted = self._open_named(name, kinds)
                    except CollectionMissing:
                        hosted = None
        if hosted is None:
            raise NotFound(
                f"no collection {name!r}: create it with POST /collections", "collection"
            )
        return hosted

    def all(self) -> list[HostedCollection]:
        """The default collection, then the named ones by name."""
        with self._lock:
            if self._catalog.shared:
                self._sync()
            return [self.default, *(self._named[name] for name in sorted(self._named))]

    def _sync(self) -> None:
        """Open the catalog's collections this replica does not know, forget the gone ones."""
        current = self._catalog.named()
        for name in list(self._named):
            if name not in current or self._named[name].gone:
                self._named.pop(name).close(snapshot=False)
        for name, kinds in current.items():
            if name not in self._named and name not in self._deleting:
                try:
                    self._open_named(name, kinds)
                except CollectionMissing:
                    continue

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
            taken = name in self._named and not self._named[name].gone
            if (
                name == DEFAULT_NAME
                or taken
                or (self._catalog.shared and self._catalog.lookup(name) is not None)
            ):
                raise Conflict(f"collection {name!r} already exists", "name")
            if len(self._named) >= MAX_COLLECTIONS:
                raise InvalidRequest(
                    f"the service holds {MAX_COLLECTIONS} collections, its limit; delete one first",
                    "name",
                )
            collection = self._catalog.create(name, kinds)
            hosted = self._host(name, collection, with_kinds(self._settings, kinds))
            self._named[name] = hosted
        return hosted

    def delete(self, name: str) -> None:
        """Stop serving a named collection, wait for the requests using it, remove its data."""
        if name == DEFAULT_NAME:
            raise NotFound(
                "no named collection 'default': the default collection cannot be deleted",
                "collection",
            )
        with self._lock:
            hosted = self._named.pop(name, None)
            known = hosted is not None or (
                self._catalog.shared and self._catalog.lookup(name) is not None
            )
            if not known or name in self._deleting:
                raise NotFound(f"no collection {name!r}", "collection")
            self._deleting.add(name)
        try:
            if hosted is not None:
                hosted.close(snapshot=False)
            self._catalog.remove(name)
        except CollectionMissing:
            raise NotFound(f"no collection {name!r}", "collection") from None
        finally:
            with self._lock:
                self._deleting.discard(name)

    def close(self) -> None:
        """Snapshot what changed and close every collection, then the backend (at shutdown)."""
        with self._lock:
            hosted = [self.default, *self._named.values()]
        for collection in hosted:
            collection.close(snapshot=True)
        self._catalog.close()
