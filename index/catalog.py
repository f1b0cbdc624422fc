"""Collections in their index backend, opened the one way both the service and ``fractal
import`` open them: :func:`catalog_for` is the one place that looks at ``FRACTAL_INDEX_BACKEND``.

- ``embedded`` (:class:`EmbeddedCatalog`): the default collection is ``FRACTAL_INDEX_DIR``
  itself (an :class:`index.Collection`), a named one ``FRACTAL_INDEX_DIR/collections/NAME/``
  with a ``collection.json`` record; the folder records which bundle made its vectors
  (``bundle.json``).
- ``milvus`` (:class:`MilvusCatalog`): each collection is a Milvus collection
  (:class:`index.milvus.MilvusCollection`) named ``{FRACTAL_MILVUS_PREFIX}_default`` or
  ``{FRACTAL_MILVUS_PREFIX}_c_{NAME}`` (``-`` written ``X``), its record a collection property.
  The catalog is **shared**: other replicas create and delete collections too.

Either way a collection gets the same index layout: the coarse prefix, C2F's shortlist prefix
(the bundle's measured one, :attr:`bundle.Manifest.shortlist_dim`) and the fine one
(:meth:`index.settings.StorageSettings.index_layout`). The factory lives in ``index/``, beside
the backends it picks, and takes :class:`index.settings.StorageSettings`, which the service's
settings extend and the bulk importer (:mod:`bulk.importer`) reads, so that neither holds it
and both build the very same collection. Problems
opening one raise :class:`IndexDirError` with one line; the service reports it as its start-up
error, ``fractal import`` as its ``error:`` line.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np

from bundle import Manifest
from index.backend import (
    BackendUnavailable,
    CollectionMissing,
    IndexBackend,
    StorageFull,
    is_disk_full,
)
from index.embedded import Collection
from index.embedded.snapshot import fsync_path
from index.embedded.store import STORE_FILE
from index.milvus import (
    MilvusCollection,
    MilvusConnection,
    MilvusParams,
    list_collections,
    stored_record,
)
from index.settings import StorageSettings

BUNDLE_RECORD = "bundle.json"
DEFAULT_NAME = "default"
COLLECTIONS_DIR = "collections"
RECORD_FILE = "collection.json"


class IndexDirError(Exception):
    """The index dir or the bundle's index parts cannot be used; the message is one line."""


def check_bundle_record(index_dir: Path, manifest: Manifest) -> None:
    """Write ``bundle.json`` in a new index dir; refuse one made with another bundle."""
    record_path = index_dir / BUNDLE_RECORD
    expected = {"name": manifest.name, "bundle_hash": manifest.content_hash, "dim": manifest.dim}
    if record_path.is_file():
        try:
            record = json.loads(record_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise IndexDirError(f"{record_path} is unreadable: {exc}") from exc
        if record != expected:
            raise IndexDirError(
                f"index dir {index_dir} holds vectors of bundle {record.get('name')!r} "
                f"({str(record.get('bundle_hash'))[:12]}), not of the served bundle "
                f"{manifest.name!r} ({manifest.content_hash[:12]}); use another "
                "FRACTAL_INDEX_DIR or re-ingest"
            )
        return
    if (index_dir / STORE_FILE).exists():
        raise IndexDirError(
            f"index dir {index_dir} has a store but no {BUNDLE_RECORD}: cannot tell which "
            "bundle made its vectors"
        )
    record_path.write_text(json.dumps(expected, indent=2) + "\n", encoding="utf-8")


def bundle_pq_codebooks(settings: StorageSettings, manifest: Manifest) -> dict[int, np.ndarray]:
    """The bundle's PQ centroids by prefix dimension (MSHC), when the service builds PQ indexes.

    The bundle's sha256 check has already vouched for the file; its shape must match the manifest.
    """
    spec = manifest.compression.pq if manifest.compression is not None else None
    if spec is None or "pq" not in settings.index_kinds + (settings.fine_index_kinds or ()):
        return {}
    path = settings.bundle_dir / spec.file
    try:
        codebooks = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise IndexDirError(f"cannot read the bundle's PQ codebooks {path}: {exc}") from exc
    if codebooks.shape != spec.shape or codebooks.dtype != np.float32:
        raise IndexDirError(
            f"{path} holds {codebooks.dtype} {list(codebooks.shape)}, the manifest says "
            f"float32 {list(spec.shape)}"
        )
    return {spec.dim: codebooks}


def _layout(settings: StorageSettings, manifest: Manifest) -> dict[int, tuple[str, ...]]:
    shortlist_dim = settings.shortlist_dim(manifest, _folder(settings))
    return settings.index_layout(manifest.coarse_dim, manifest.fine_dim, shortlist_dim)


def _prefix_dims(settings: StorageSettings, manifest: Manifest) -> list[int]:
    shortlist_dim = settings.shortlist_dim(manifest, _folder(settings))
    return sorted({manifest.coarse_dim, shortlist_dim, manifest.fine_dim})


def _folder(settings: StorageSettings) -> Path | None:
    """The collection's folder, where its own first-stage record lives (embedded backend)."""
    return settings.index_dir if settings.index_backend == "embedded" else None


def _fragment_dim(settings: StorageSettings, manifest: Manifest) -> int | None:
    if manifest.fragment_dim is None and settings.sfs:
        return settings.sfs_fragment_dim
    return manifest.fragment_dim


def with_kinds(settings: StorageSettings, index_kinds: tuple[str, ...]) -> StorageSettings:
    """The settings with a named collection's index kinds (at every prefix)."""
    return settings.model_copy(update={"index_kinds": index_kinds, "fine_index_kinds": None})


class Catalog(Protocol):
    """Where a service's collections live: the default one and the named ones."""

    shared: bool
    """Whether other processes create and delete collections in it too (so a name this
    process does not know may exist, and one it knows may be gone)."""

    def open_default(self) -> IndexBackend: ...

    def named(self) -> dict[str, tuple[str, ...]]:
        """The named collections now, with their index kinds."""
        ...

    def lookup(self, name: str) -> tuple[str, ...] | None:
        """A named collection's index kinds, or None when there is no such collection."""
        ...

    def open(self, name: str, index_kinds: tuple[str, ...]) -> IndexBackend: ...

    def create(self, name: str, index_kinds: tuple[str, ...]) -> IndexBackend: ...

    def remove(self, name: str) -> None:
        """Remove a named collection's data (it is closed already)."""
        ...

    def problem(self) -> str | None:
        """None while the backend can serve, else why not (for ``/ready``)."""
        ...

    def close(self) -> None: ...


class EmbeddedCatalog:
    """Collections in folders of ``FRACTAL_INDEX_DIR`` (see the module docstring)."""

    shared = False

    def __init__(self, settings: StorageSettings, manifest: Manifest) -> None:
        self._settings = settings
        self._manifest = manifest

    @property
    def _root(self) -> Path:
        return self._settings.index_dir / COLLECTIONS_DIR

    def _open_dir(self, settings: StorageSettings) -> Collection:
        """The collection in ``settings.index_dir``, its graphs those of its first stage
        (:meth:`index.settings.StorageSettings.for_collection`: with ``FRACTAL_FIRST_STAGE=index``
        the one measured on its own documents, which a snapshot of another graph rebuilds)."""
        manifest = self._manifest
        try:
            settings.index_dir.mkdir(parents=True, exist_ok=True)
            check_bundle_record(settings.index_dir, manifest)
            settings = settings.for_collection(manifest, settings.index_dir)
            return Collection(
                settings.index_dir,
                dim=manifest.dim,
                prefix_dims=_prefix_dims(settings, manifest),
                index_kinds=settings.index_kinds,
                hnsw=settings.hnsw,
                pq=settings.pq,
                fragment_dim=_fragment_dim(settings, manifest),
                pq_codebooks=bundle_pq_codebooks(settings, manifest),
                layout=_layout(settings, manifest),
                full_dtype=settings.full_vectors_dtype,
                store_check=settings.store_check,
            )
        except (OSError, ValueError) as exc:
            raise IndexDirError(f"cannot open the index in {settings.index_dir}: {exc}") from exc

    def _named_settings(self, name: str, index_kinds: tuple[str, ...]) -> StorageSettings:
        named = with_kinds(self._settings, index_kinds)
        return named.model_copy(update={"index_dir": self._root / name})

    def open_default(self) -> Collection:
        return self._open_dir(self._settings)

    def named(self) -> dict[str, tuple[str, ...]]:
        found = {}
        for record_path in sorted(self._root.glob(f"*/{RECORD_FILE}")):
            try:
                record = json.loads(record_path.read_text(encoding="utf-8"))
                name, kinds = record["name"], tuple(record["index_kinds"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise IndexDirError(f"{record_path} is not a collection record: {exc}") from exc
            if record_path.parent.name != name:
                raise IndexDirError(f"{record_path} names collection {name!r}, not its folder's")
            found[name] = kinds
        return found

    def lookup(self, name: str) -> tuple[str, ...] | None:
        return self.named().get(name)

    def open(self, name: str, index_kinds: tuple[str, ...]) -> Collection:
        return self._open_dir(self._named_settings(name, index_kinds))

    def create(self, name: str, index_kinds: tuple[str, ...]) -> Collection:
        """Its folder, store and record; when any step fails, the folder is removed (nothing
        of the collection is left) and a full disk is :class:`StorageFull`."""
        folder = self._root / name
        if folder.exists():  # left over from a deletion cut short: it held nothing acked
            shutil.rmtree(folder)
        collection: Collection | None = None
        try:
            folder.mkdir(parents=True)
            collection = self.open(name, index_kinds)
            # The record is written last: a folder without one is not a collection.
            record = {"name": name, "index_kinds": list(index_kinds)}
            temporary = folder / f".{RECORD_FILE}.{uuid.uuid4().hex}"
            temporary.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
            fsync_path(temporary)
            temporary.replace(folder / RECORD_FILE)
            # Durable before the creation is acknowledged, power loss included.
            fsync_path(folder)
            fsync_path(self._root)
        except Exception as exc:
            if collection is not None:
                collection.close()
            shutil.rmtree(folder, ignore_errors=True)
            if is_disk_full(exc):
                raise StorageFull(folder, exc) from exc
            raise
        return collection

    def remove(self, name: str) -> None:
        folder = self._root / name
        # Unlinking the record first makes a crash mid-way leave no collection behind; the
        # unlink is durable before the deletion is acknowledged, power loss included.
        (folder / RECORD_FILE).unlink(missing_ok=True)
        if folder.is_dir():
            fsync_path(folder)
        shutil.rmtree(folder, ignore_errors=True)

    def problem(self) -> str | None:
        return None

    def close(self) -> None:
        pass


def milvus_collection_name(prefix: str, name: str | None) -> str:
    """The Milvus collection of a Fractal collection (None: the default one). Fractal names are
    lowercase, so writing ``-`` (which Milvus names cannot hold) as ``X`` keeps them apart."""
    if name is None:
        return f"{prefix}_default"
    return f"{prefix}_c_{name.replace('-', 'X')}"


class MilvusCatalog:
    """Collections in a Milvus server (see the module docstring), through one connection."""

    shared = True

    def __init__(
        self,
        settings: StorageSettings,
        manifest: Manifest,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self._settings = settings
        self._manifest = manifest
        self.connection = MilvusConnection(
            settings.milvus_uri,
            settings.milvus_token.get_secret_value() if settings.milvus_token else None,
            settings.milvus_timeout_s,
            on_error,
        )
        self._params = MilvusParams(
            ann_index=settings.milvus_ann_index,
            hnsw=settings.hnsw,
            pq=settings.pq,
            nlist=settings.milvus_ivf_nlist,
            nprobe=settings.milvus_ivf_nprobe,
            timeout_s=settings.milvus_timeout_s,
        )
        try:
            self.connection.wait(settings.milvus_connect_timeout_s)
        except BackendUnavailable as exc:
            raise IndexDirError(
                f"{exc} (waited {settings.milvus_connect_timeout_s:g} s; "
                "FRACTAL_MILVUS_CONNECT_TIMEOUT_S)"
            ) from exc

    @property
    def _named_prefix(self) -> str:
        return milvus_collection_name(self._settings.milvus_prefix, "")

    def milvus_name(self, name: str | None) -> str:
        return milvus_collection_name(self._settings.milvus_prefix, name)

    def _open(self, name: str | None, settings: StorageSettings, create: bool) -> MilvusCollection:
        manifest = self._manifest
        record = {
            "name": name or DEFAULT_NAME,
            "bundle": manifest.name,
            "bundle_hash": manifest.content_hash,
            "index_kinds": list(settings.index_kinds),
        }
        try:
            return MilvusCollection(
                self.connection,
                self.milvus_name(name),
                dim=manifest.dim,
                prefix_dims=_prefix_dims(settings, manifest),
                layout=_layout(settings, manifest),
                record=record,
                params=self._params,
                fragment_dim=_fragment_dim(settings, manifest),
                create=create,
            )
        except ValueError as exc:
            raise IndexDirError(str(exc)) from exc

    def open_default(self) -> MilvusCollection:
        try:
            return self._open(None, self._settings, create=True)
        except BackendUnavailable as exc:
            raise IndexDirError(str(exc)) from exc

    def named(self) -> dict[str, tuple[str, ...]]:
        found = {}
        for milvus_name in list_collections(self.connection, self._named_prefix):
            name = milvus_name.removeprefix(self._named_prefix).replace("X", "-")
            kinds = self.lookup(name)
            if kinds is not None:
                found[name] = kinds
        return found

    def lookup(self, name: str) -> tuple[str, ...] | None:
        try:
            record = stored_record(self.connection, self.milvus_name(name))
        except CollectionMissing:
            return None
        if record is None:  # being created by another replica: not a collection yet
            return None
        return tuple(record.get("index_kinds", ()))

    def open(self, name: str, index_kinds: tuple[str, ...]) -> MilvusCollection:
        return self._open(name, with_kinds(self._settings, index_kinds), create=False)

    def create(self, name: str, index_kinds: tuple[str, ...]) -> MilvusCollection:
        return self._open(name, with_kinds(self._settings, index_kinds), create=True)

    def remove(self, name: str) -> None:
        milvus_name = self.milvus_name(name)
        self.connection.call("drop_collection", lambda client: client.drop_collection(milvus_name))

    def problem(self) -> str | None:
        return self.connection.problem()

    def close(self) -> None:
        self.connection.close()


def catalog_for(
    settings: StorageSettings, manifest: Manifest, on_error: Callable[[str], None] | None = None
) -> Catalog:
    """The catalog of ``FRACTAL_INDEX_BACKEND``; ``on_error`` counts failed backend calls.
    With ``FRACTAL_FIRST_STAGE=bundle`` (or ``index``) the graphs take the measured first stage
    (:meth:`index.settings.StorageSettings.for_collection`): an embedded collection's own where
    its folder records one, else the bundle's."""
    if settings.index_backend == "embedded":
        return EmbeddedCatalog(settings, manifest)
    settings = settings.for_collection(manifest)
    try:
        import pymilvus  # noqa: F401
    except ImportError:
        raise IndexDirError(
            "FRACTAL_INDEX_BACKEND=milvus needs pymilvus: pip install 'fractal[milvus]'"
        ) from None
    return MilvusCatalog(settings, manifest, on_error)
