"""Checking an embedded index folder against silent corruption (``fractal check INDEX_DIR``).

Each collection's store of record is checked in full: SQLite's ``integrity_check`` (every page's
structure, and every SQL index against its table), then every document against the checksum
written with it (:meth:`index.embedded.store.Store.verify`). Each problem names its collection and,
for a row, the document's id.

The FAISS indexes and the full vectors' file are not checked here: they are derived from the
store, carry their own sha256 (``snapshot/manifest.json``, ``vectors.json``), and each one that
does not match is rebuilt from the store when the collection opens.

The check reads the folder while a service may be serving it (SQLite's WAL lets both read); a
store made before rows had checksums gets them as it opens here, as it would in the service.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from index.catalog import COLLECTIONS_DIR, DEFAULT_NAME, RECORD_FILE
from index.embedded.store import STORE_FILE, Store, stored_dim

LISTED_PAGE_PROBLEMS = 100
"""SQLite's integrity check stops after this many problems: a damaged file has many."""


class NotAnIndexDir(ValueError):
    """The folder holds no embedded collection; the message is one line."""


@dataclass
class StoreCheck:
    """What the check found in one collection's store."""

    collection: str
    path: Path
    documents: int = 0
    page_problems: list[str] = field(default_factory=list)
    row_problems: list[str] = field(default_factory=list)

    @property
    def sound(self) -> bool:
        return not self.page_problems and not self.row_problems


def collection_folders(index_dir: Path) -> Iterator[tuple[str, Path]]:
    """Each collection of an embedded index dir as ``(name, folder)``: the default one (the
    folder itself, when it holds a store), then every named one that has a record."""
    if (index_dir / STORE_FILE).is_file():
        yield DEFAULT_NAME, index_dir
    for record in sorted((index_dir / COLLECTIONS_DIR).glob(f"*/{RECORD_FILE}")):
        try:
            name = str(json.loads(record.read_text(encoding="utf-8"))["name"])
        except (OSError, ValueError, KeyError, TypeError):
            name = record.parent.name
        yield name, record.parent


def check_store(
    name: str, folder: Path, progress: Callable[[int], None] | None = None
) -> StoreCheck:
    """Check one collection's store in full (see the module docstring)."""
    path = folder / STORE_FILE
    result = StoreCheck(name, path)
    dim = stored_dim(path)
    if dim is None:
        result.page_problems.append(f"{path} is not a readable store")
        return result
    try:
        store = Store(path, dim, check="off")
    except ValueError as exc:  # StoreCorrupt: SQLite could not even open it
        result.page_problems.append(str(exc))
        return result
    try:
        result.documents = store.count()
        result.page_problems = store.page_problems("integrity_check", LISTED_PAGE_PROBLEMS)
        result.row_problems = [str(problem) for problem in store.verify(progress)]
    finally:
        store.close()
    return result


def check_index_dir(
    index_dir: Path, progress: Callable[[int], None] | None = None
) -> list[StoreCheck]:
    """Check every collection of an embedded index dir; :class:`NotAnIndexDir` when it has
    none. ``progress`` is told how many rows each step checked, across collections."""
    if not index_dir.is_dir():
        raise NotAnIndexDir(f"{index_dir} is not a folder")
    folders = list(collection_folders(index_dir))
    if not folders:
        raise NotAnIndexDir(
            f"{index_dir} holds no collection ({STORE_FILE}, or {COLLECTIONS_DIR}/NAME/"
            f"{RECORD_FILE}); give the folder the service opens (FRACTAL_INDEX_DIR)"
        )
    return [check_store(name, folder, progress) for name, folder in folders]
