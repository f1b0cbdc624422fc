"""The store of record: documents and their full vectors in SQLite.

FAISS indexes are derived from this store and can always be rebuilt from it. Every write commits
(WAL journal, ``synchronous=FULL``) before it returns, so a write that returned survives a crash.

Each version of a document is one row with an integer ``row_id`` that never changes and is never
reused (``AUTOINCREMENT``); it is the document's FAISS id. Replacing a document deletes its row
and inserts a new one, so an index only ever adds and removes ids, never edits one in place.

Every row added or removed gets the next value of a change counter and a line in the ``changes``
log. An index that reflects the store up to counter ``c`` catches up with
:meth:`Store.changes_since` ``(c)``.

Every row carries a checksum of its id, text, metadata and vector
(:mod:`index.embedded.row_checksum`), written in the same transaction and checked whenever the row
is read: a row whose bytes changed on disk raises :class:`~index.backend.RowCorrupt` instead of
being served. :meth:`Store.verify` checks every row (``fractal check``, and the ``full`` check at
open). A store made before rows had checksums gets them at open, from the rows as they are then.

Metadata is also kept in an indexed form, so that a filter (:mod:`index.filters`) finds its rows
without reading every document: ``metadata_values`` holds one ``(key, value, row_id)`` line per
key and scalar value of every present row (:func:`index.filters.indexed_values`), clustered by
``(key, value, row_id)`` (a ``WITHOUT ROWID`` table whose primary key is that index, so a
condition is one range search of it) and indexed by ``row_id`` for deletes. It is written in the
transaction that writes the row, and built at open for a store made before it existed.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import numpy as np

from index.backend import RowCorrupt, StorageFull, is_disk_full
from index.embedded.row_checksum import check_contents, check_vector, row_checksum
from index.filters import Filter, indexed_values, to_sql
from index.types import Contents, Document, parse_metadata

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS documents (
        row_id INTEGER PRIMARY KEY AUTOINCREMENT,
        doc_id TEXT NOT NULL UNIQUE,
        text TEXT NOT NULL,
        metadata TEXT NOT NULL,
        vector BLOB NOT NULL,
        seq INTEGER NOT NULL,
        checksum BLOB
    )""",
    """CREATE TABLE IF NOT EXISTS changes (
        seq INTEGER PRIMARY KEY,
        row_id INTEGER NOT NULL,
        op TEXT NOT NULL CHECK (op IN ('add', 'remove'))
    )""",
    # Naming a search's hits reads row → doc_id from this dense index, not from the documents'
    # rows (a full vector each: a few rows per page), so it touches a page or two per query.
    "CREATE INDEX IF NOT EXISTS doc_names ON documents (row_id, doc_id)",
)
_REMOVED_IDS = (
    "ALTER TABLE changes ADD COLUMN doc_id TEXT",
    "CREATE INDEX IF NOT EXISTS removed_rows ON changes (row_id) WHERE op = 'remove'",
)
"""A removal's string id stays in the log until the indexes have dropped the row (the log is
pruned at a snapshot), so a search that still finds the row can name it
(:meth:`Store.doc_ids_of`). Added to stores made before."""
_METADATA_VALUES = (
    # ``value`` is declared BLOB, i.e. with no type affinity: strings, numbers and the blobs
    # that stand for booleans and "no value" are stored and compared as they are.
    """CREATE TABLE metadata_values (
        key TEXT NOT NULL,
        value BLOB NOT NULL,
        row_id INTEGER NOT NULL,
        PRIMARY KEY (key, value, row_id)
    ) WITHOUT ROWID""",
    "CREATE INDEX metadata_values_rows ON metadata_values (row_id)",
)
METADATA_CHUNK = 10_000
"""Documents read per step when the metadata index or the checksums are built for an existing
store, and when :meth:`Store.verify` checks every row."""


STORE_FILE = "store.sqlite3"
"""The store's file name in a collection's folder."""
STORE_CHECKS = {"quick": "quick_check", "full": "integrity_check", "off": None}
"""How a store is checked when it is opened: SQLite's ``PRAGMA quick_check`` (every page's
structure, O(size); about 0.1 s for 100K documents of 384-d, 210 MB, from the page cache),
``integrity_check`` (also that every index agrees with its table; about as fast there) followed by
every row against its checksum (:meth:`Store.verify`), or not at all. SQLite's checks cannot see
bytes changed inside a stored value; the rows' checksums do, at open with ``full`` and on every
read."""
CORRUPT_CODES = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}
MAX_LISTED_PROBLEMS = 3
ROWS_PER_LOOKUP = 500
"""Row ids bound as parameters of one lookup query (a search names k rows per query)."""


def stored_dim(path: str | Path) -> int | None:
    """The dim a store file records, read without writing to it; None when the file is not a
    store (no such file, not SQLite, or no record of a dim)."""
    try:
        connection = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        row = connection.execute("SELECT value FROM meta WHERE key = 'dim'").fetchone()
    except sqlite3.Error:
        return None
    finally:
        connection.close()
    return None if row is None else int(row[0])


def _marks(values: Sequence[object]) -> str:
    """One ``?`` per value, comma-separated: the parameters of an ``IN (...)`` list."""
    return ", ".join("?" * len(values))


OnCorrupt = Callable[[RowCorrupt], None]
"""Told of each row whose vector fails its checksum, where a reader goes on without it."""


class StoreCorrupt(ValueError):
    """The store's file is damaged (a check at open found problems, or SQLite could not read
    it); the message is one line that says what to do."""


@dataclass(frozen=True)
class Upserted:
    """What one upsert committed: per document, its new row and the row it replaced (if any)."""

    rows: tuple[int, ...]
    replaced: tuple[int | None, ...]
    counter: int


@dataclass(frozen=True)
class ChangeSet:
    """Rows added (still present) and rows removed (present before) since some counter value."""

    added: tuple[int, ...]
    removed: tuple[int, ...]
    counter: int


_DOCUMENT_COLUMNS = "row_id, doc_id, text, metadata, vector, checksum"


def _document(record: tuple) -> Document:
    """A :class:`Document` from a row of ``_DOCUMENT_COLUMNS``, checked against its checksum."""
    row, doc_id, text, metadata, vector, checksum = record
    check_contents(row, doc_id, text, metadata, checksum)
    check_vector(row, doc_id, vector, checksum)
    values = np.frombuffer(vector, dtype="<f4").astype(np.float32)
    return Document(id=doc_id, text=text, vector=values, metadata=parse_metadata(metadata))


def _contents(record: tuple) -> Contents:
    """The :class:`Contents` of a row's ``row_id, doc_id, text, metadata, checksum``, checked."""
    row, doc_id, text, metadata, checksum = record
    check_contents(row, doc_id, text, metadata, checksum)
    return Contents(doc_id, text, parse_metadata(metadata))


class Store:
    """Documents in one SQLite file; safe to use from several threads.

    Writes are serialised by a lock and go through one connection; reads use one connection per
    thread, so they never wait for a write in progress (WAL).
    """

    def __init__(self, path: str | Path, dim: int, check: str = "quick") -> None:
        if dim <= 0:
            raise ValueError(f"dim must be positive, got {dim}")
        if check not in STORE_CHECKS:
            raise ValueError(f"check must be one of {', '.join(STORE_CHECKS)}, got {check!r}")
        self.path = Path(path)
        self.dim = dim
        self._write_lock = threading.Lock()
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._writer = self._connect()
        try:
            self._writer.execute("PRAGMA journal_mode=WAL")
            self._check(STORE_CHECKS[check])
            self._open_schema(dim)
            if check == "full":
                self._check_rows()
        except BaseException as exc:
            self.close()
            if isinstance(exc, sqlite3.DatabaseError) and exc.sqlite_errorcode in CORRUPT_CODES:
                raise self._corrupt(str(exc)) from exc
            raise
        self.store_id: str = self._meta("store_id") or ""

    def _corrupt(self, problem: str) -> StoreCorrupt:
        return StoreCorrupt(
            f"the store {self.path} is corrupt ({problem}); restore the index folder from a "
            "backup or rebuild it from the corpus (fractal import)"
        )

    def page_problems(self, pragma: str, limit: int = MAX_LISTED_PROBLEMS) -> list[str]:
        """What SQLite's check ``pragma`` (``quick_check`` or ``integrity_check``) finds, at
        most ``limit`` problems, one line each; empty when the file is sound."""
        problems = [  # one line each: SQLite's own may span several
            " ".join(str(row[0]).split())
            for row in self._writer.execute(f"PRAGMA {pragma}({limit})")
        ]
        return [] if problems == ["ok"] else problems

    def _check(self, pragma: str | None) -> None:
        """Run SQLite's check ``pragma`` (:data:`STORE_CHECKS`); :class:`StoreCorrupt` naming
        the first problems it finds."""
        if pragma is None:
            return
        problems = self.page_problems(pragma)
        if problems:
            raise self._corrupt(f"PRAGMA {pragma}: " + "; ".join(problems))

    def _open_schema(self, dim: int) -> None:
        """Create or upgrade the tables; :class:`ValueError` for a store of another ``dim``."""
        with self._write_lock:
            self._writer.execute("BEGIN IMMEDIATE")
            for statement in _SCHEMA:
                self._writer.execute(statement)
            columns = {row[1] for row in self._writer.execute("PRAGMA table_info(changes)")}
            if "doc_id" not in columns:
                for statement in _REMOVED_IDS:
                    self._writer.execute(statement)
            tables = {row[0] for row in self._writer.execute("SELECT name FROM sqlite_master")}
            if "metadata_values" not in tables:
                self._build_metadata_index()
            columns = {row[1] for row in self._writer.execute("PRAGMA table_info(documents)")}
            if "checksum" not in columns:
                self._add_checksums()
            stored_dim = self._meta("dim")
            if stored_dim is None:
                self._set_meta("dim", str(dim))
                self._set_meta("store_id", uuid.uuid4().hex)
                self._set_meta("counter", "0")
                self._set_meta("pruned_through", "0")
            self._writer.execute("COMMIT")
        if stored_dim is not None and int(stored_dim) != dim:
            raise ValueError(f"{self.path} holds {stored_dim}-d vectors, not {dim}-d")

    def _build_metadata_index(self) -> None:
        """Create ``metadata_values`` and fill it from every present document (inside the
        caller's transaction): the filters' index, for a store made before it."""
        for statement in _METADATA_VALUES:
            self._writer.execute(statement)
        cursor = self._writer.execute("SELECT row_id, metadata FROM documents ORDER BY row_id")
        while records := cursor.fetchmany(METADATA_CHUNK):
            self._writer.executemany(
                "INSERT OR IGNORE INTO metadata_values VALUES (?, ?, ?)",
                [
                    (key, value, row)
                    for row, metadata in records
                    for key, value in indexed_values(json.loads(metadata))
                ],
            )

    def _add_checksums(self) -> None:
        """Add the ``checksum`` column and fill it from every row as it is now (inside the
        caller's transaction): for a store made before rows had checksums."""
        self._writer.execute("ALTER TABLE documents ADD COLUMN checksum BLOB")
        cursor = self._writer.execute(
            "SELECT row_id, doc_id, text, metadata, vector FROM documents ORDER BY row_id"
        )
        while records := cursor.fetchmany(METADATA_CHUNK):
            self._writer.executemany(
                "UPDATE documents SET checksum = ? WHERE row_id = ?",
                [(row_checksum(*record[1:]), record[0]) for record in records],
            )

    def verify(self, progress: Callable[[int], None] | None = None) -> Iterator[RowCorrupt]:
        """Every present row that does not match its checksum, in row order, all read in one
        read transaction: O(documents), about as fast as reading them. ``progress`` is told
        how many rows each step checked."""
        db = self._reader()
        db.execute("BEGIN")
        try:
            cursor = db.execute(f"SELECT {_DOCUMENT_COLUMNS} FROM documents ORDER BY row_id")
            while records := cursor.fetchmany(METADATA_CHUNK):
                for record in records:
                    try:
                        _document(record)
                    except RowCorrupt as problem:
                        yield problem
                if progress is not None:
                    progress(len(records))
        finally:
            db.execute("COMMIT")

    def _check_rows(self) -> None:
        """:class:`StoreCorrupt` naming the first rows that fail their checksum, if any."""
        problems = [str(problem) for problem in islice(self.verify(), MAX_LISTED_PROBLEMS)]
        if problems:
            raise self._corrupt("; ".join(problems))

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute("PRAGMA busy_timeout=30000")
        with self._connections_lock:
            self._connections.append(connection)
        return connection

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction on the writer connection, the write lock held: committed when
        the block ends, rolled back on any error; a full disk is :class:`StorageFull`."""
        with self._write_lock:
            db = self._writer
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    yield db
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:  # SQLite rolls back by itself after SQLITE_FULL
                        db.execute("ROLLBACK")
                    raise
            except sqlite3.OperationalError as exc:
                if is_disk_full(exc):
                    raise StorageFull(self.path.parent, exc) from exc
                raise

    def _reader(self) -> sqlite3.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._connect()
            self._local.connection = connection
        return connection

    def _meta(self, key: str) -> str | None:
        row = self._writer.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def _set_meta(self, key: str, value: str) -> None:
        self._writer.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def _read_meta_int(self, key: str) -> int:
        row = self._reader().execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return int(row[0])

    @property
    def counter(self) -> int:
        """The change counter: how many rows have ever been added or removed."""
        return self._read_meta_int("counter")

    @property
    def pruned_through(self) -> int:
        """Changes up to this counter value are no longer in the log."""
        return self._read_meta_int("pruned_through")

    @property
    def next_row_id(self) -> int:
        """The row id the next added row gets: one past the highest ever used
        (``AUTOINCREMENT``); rows added after it number upwards from it."""
        row = (
            self._reader()
            .execute("SELECT seq FROM sqlite_sequence WHERE name = 'documents'")
            .fetchone()
        )
        return 1 if row is None else int(row[0]) + 1

    def upsert(self, documents: Sequence[Document]) -> Upserted:
        """Add the documents, replacing any with the same id; committed when this returns."""
        for document in documents:
            if document.vector.shape != (self.dim,):
                raise ValueError(
                    f"document {document.id!r}: vector must have shape ({self.dim},), "
                    f"got {document.vector.shape}"
                )
        rows: list[int] = []
        replaced: list[int | None] = []
        with self._transaction() as db:
            seq = int(self._meta("counter") or 0)
            for document in documents:
                old = db.execute(
                    "SELECT row_id FROM documents WHERE doc_id = ?", (document.id,)
                ).fetchone()
                if old is not None:
                    seq += 1
                    self._log_removal(seq, old[0], document.id)
                seq += 1
                metadata = json.dumps(document.metadata)
                vector = np.asarray(document.vector, "<f4").tobytes()
                cursor = db.execute(
                    "INSERT INTO documents (doc_id, text, metadata, vector, seq, checksum) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        document.id,
                        document.text,
                        metadata,
                        vector,
                        seq,
                        row_checksum(document.id, document.text, metadata, vector),
                    ),
                )
                row = int(cursor.lastrowid or 0)
                db.execute("INSERT INTO changes VALUES (?, ?, 'add', NULL)", (seq, row))
                db.executemany(
                    "INSERT OR IGNORE INTO metadata_values VALUES (?, ?, ?)",
                    [(key, value, row) for key, value in indexed_values(document.metadata)],
                )
                rows.append(row)
                replaced.append(None if old is None else int(old[0]))
            self._set_meta("counter", str(seq))
        return Upserted(tuple(rows), tuple(replaced), seq)

    def _log_removal(self, seq: int, row: int, doc_id: str) -> None:
        """Delete a document's row and log its removal (inside the caller's transaction)."""
        self._writer.execute("DELETE FROM documents WHERE row_id = ?", (row,))
        self._writer.execute("DELETE FROM metadata_values WHERE row_id = ?", (row,))
        self._writer.execute("INSERT INTO changes VALUES (?, ?, 'remove', ?)", (seq, row, doc_id))

    def delete(self, doc_ids: Sequence[str]) -> ChangeSet:
        """Remove the documents with these ids (unknown ids are ignored); committed on return."""
        removed: list[int] = []
        with self._transaction() as db:
            seq = int(self._meta("counter") or 0)
            for doc_id in doc_ids:
                old = db.execute("SELECT row_id FROM documents WHERE doc_id = ?", (doc_id,))
                found = old.fetchone()
                if found is None:
                    continue
                seq += 1
                self._log_removal(seq, found[0], doc_id)
                removed.append(int(found[0]))
            self._set_meta("counter", str(seq))
        return ChangeSet((), tuple(removed), seq)

    def get(self, doc_id: str) -> Document | None:
        """The document with this id, or None."""
        row = (
            self._reader()
            .execute(f"SELECT {_DOCUMENT_COLUMNS} FROM documents WHERE doc_id = ?", (doc_id,))
            .fetchone()
        )
        return None if row is None else _document(row)

    def contents_of(self, doc_ids: Sequence[str]) -> list[Contents | None]:
        """The text and metadata of the documents with these ids, in the same order (None where
        there is none), read with one query (the ids travel as one JSON parameter, so there is
        no limit on their number). The vectors stay unread: a search shows none."""
        records = (
            self._reader()
            .execute(
                "SELECT row_id, doc_id, text, metadata, checksum FROM documents "
                "WHERE doc_id IN (SELECT value FROM json_each(?))",
                (json.dumps(list(doc_ids)),),
            )
            .fetchall()
        )
        found = {record[1]: _contents(record) for record in records}
        return [found.get(doc_id) for doc_id in doc_ids]

    def present(self, doc_ids: Sequence[str]) -> set[str]:
        """Which of these ids are present, read with one query of the ids alone."""
        rows = (
            self._reader()
            .execute(
                "SELECT doc_id FROM documents WHERE doc_id IN (SELECT value FROM json_each(?))",
                (json.dumps(list(doc_ids)),),
            )
            .fetchall()
        )
        return {doc_id for (doc_id,) in rows}

    def filter_sql(self, node: Filter) -> tuple[str, list]:
        """The SQL that lists the rows matching ``node`` (in no set order, a row with a list
        value possibly more than once) and its parameters: one search of ``metadata_values``'s
        primary key per condition."""
        return to_sql(node, "metadata_values", "documents")

    def filter_plan(self, node: Filter) -> list[str]:
        """SQLite's ``EXPLAIN QUERY PLAN`` of :meth:`filter_sql`, one line per step."""
        sql, params = self.filter_sql(node)
        plan = self._reader().execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()
        return [str(step[-1]) for step in plan]

    def rows_matching(self, node: Filter) -> np.ndarray:
        """The row ids of the present documents that match ``node``, ascending.

        They come back as one comma-separated text (``group_concat``) parsed by numpy: several
        times faster than fetching a Python tuple per row, which at a million documents and a
        filter that keeps 10% of them would cost more than the search."""
        sql, params = self.filter_sql(node)
        text = self._reader().execute(f"SELECT group_concat(row_id) FROM ({sql})", params)
        joined = text.fetchone()[0]
        if not joined:
            return np.zeros(0, dtype=np.int64)
        return np.unique(np.fromstring(joined, dtype=np.int64, sep=","))

    def count(self) -> int:
        """How many documents are present."""
        return int(self._reader().execute("SELECT COUNT(*) FROM documents").fetchone()[0])

    def live_row_ids(self) -> np.ndarray:
        """Every present document's row id, ascending."""
        records = self._reader().execute("SELECT row_id FROM documents ORDER BY row_id")
        return np.fromiter((record[0] for record in records), dtype=np.int64)

    def _vectors(self, records: Sequence[tuple], on_corrupt: OnCorrupt | None) -> np.ndarray:
        """The full vectors of rows of ``row_id, doc_id, vector, checksum``, each checked: one
        that fails raises :class:`~index.backend.RowCorrupt`, or with ``on_corrupt`` is told to
        it and read as zeros."""
        blobs = []
        for row, doc_id, vector, checksum in records:
            try:
                check_vector(row, doc_id, vector, checksum)
            except RowCorrupt as problem:
                if on_corrupt is None:
                    raise
                on_corrupt(problem)
                vector = bytes(4 * self.dim)
            blobs.append(vector)
        joined = b"".join(blobs)
        return np.frombuffer(joined, dtype="<f4").astype(np.float32).reshape(-1, self.dim)

    def vectors_of(self, rows: np.ndarray, on_corrupt: OnCorrupt | None = None) -> np.ndarray:
        """The full vectors of these present rows, in the order given, read with one query
        (``on_corrupt``: see :meth:`iter_vectors`)."""
        records = self._reader().execute(
            "SELECT row_id, doc_id, vector, checksum FROM documents "
            "WHERE row_id IN (SELECT value FROM json_each(?))",
            (json.dumps([int(row) for row in rows]),),
        )
        found = {record[0]: record for record in records.fetchall()}
        missing = [int(row) for row in rows if int(row) not in found]
        if missing:
            raise KeyError(f"rows {missing[:5]} are not in the store")
        return self._vectors([found[int(row)] for row in rows], on_corrupt)

    def iter_vectors(
        self, chunk: int, on_corrupt: OnCorrupt | None = None
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Every present document's ``(row ids, full vectors)``, ``chunk`` rows at a time in row
        order, all from one read transaction (one consistent state of the store). A vector that
        fails its checksum raises :class:`~index.backend.RowCorrupt`; with ``on_corrupt`` it is
        told to it and read as zeros instead, so that the other rows still make their file and
        indexes, and the damaged one scores 0 against every query."""
        db = self._reader()
        db.execute("BEGIN")
        try:
            cursor = db.execute(
                "SELECT row_id, doc_id, vector, checksum FROM documents ORDER BY row_id"
            )
            while records := cursor.fetchmany(chunk):
                rows = np.fromiter((record[0] for record in records), np.int64, len(records))
                yield rows, self._vectors(records, on_corrupt)
        finally:
            db.execute("COMMIT")

    def names_extent(self) -> tuple[int, int]:
        """One past the highest present row id, and the UTF-8 bytes of every present
        document's id: the room their names take (summed in SQLite over the names' index)."""
        top, size = self._reader().execute(
            "SELECT max(row_id), total(length(CAST(doc_id AS BLOB))) "
            "FROM documents INDEXED BY doc_names"
        ).fetchone()
        return (0 if top is None else int(top) + 1), int(size)

    def iter_names(self, chunk: int) -> Iterator[tuple[np.ndarray, list[str]]]:
        """Every present document's ``(row ids, string ids)``, ``chunk`` rows at a time in row
        order, read from the names' index in one statement (one consistent state)."""
        cursor = self._reader().execute(
            "SELECT row_id, doc_id FROM documents INDEXED BY doc_names ORDER BY row_id"
        )
        while records := cursor.fetchmany(chunk):
            rows, doc_ids = zip(*records, strict=True)
            yield np.array(rows, dtype=np.int64), list(doc_ids)

    def doc_ids_of(self, rows: Sequence[int]) -> list[str | None]:
        """The string ids of these rows in the order given (see :meth:`named`)."""
        return [name for name, _ in self.named(rows)]

    def named(
        self, rows: Sequence[int], contents: bool = False
    ) -> list[tuple[str | None, Contents | None]]:
        """The string id of each of these rows in the order given, and with ``contents`` its
        text and metadata (see :meth:`names`); ``(None, None)`` for a row with no name."""
        found = self.names(rows, contents)
        return [found.get(int(row), (None, None)) for row in rows]

    def names(
        self, rows: Iterable[int], contents: bool = False
    ) -> dict[int, tuple[str, Contents | None]]:
        """By row, the string id of each of these rows that has one, and with ``contents`` its
        text and metadata, read together: of present documents, and (the id alone) of rows
        removed since the last pruning of the log (none for an older one). One query by row id,
        and a second only when some row is no longer present."""
        wanted = list(dict.fromkeys(map(int, rows)))
        db = self._reader()
        found: dict[int, tuple[str, Contents | None]] = {}
        # The names alone from their index; with contents, the rows themselves.
        source = (
            "row_id, doc_id, text, metadata, checksum FROM documents"
            if contents
            else "row_id, doc_id FROM documents INDEXED BY doc_names"
        )
        for start in range(0, len(wanted), ROWS_PER_LOOKUP):
            chunk = wanted[start : start + ROWS_PER_LOOKUP]
            for record in db.execute(f"SELECT {source} WHERE row_id IN ({_marks(chunk)})", chunk):
                found[record[0]] = (record[1], _contents(record) if contents else None)
        if len(found) == len(wanted):
            return found
        missing = [row for row in wanted if row not in found]
        for start in range(0, len(missing), ROWS_PER_LOOKUP):
            chunk = missing[start : start + ROWS_PER_LOOKUP]
            for row, doc_id in db.execute(
                f"SELECT row_id, doc_id FROM changes WHERE op = 'remove' AND row_id IN "
                f"({_marks(chunk)})",
                chunk,
            ):
                found[row] = (doc_id, None)
        return found

    def changes_since(self, counter: int) -> ChangeSet:
        """The net change after ``counter``: rows added since (and still present) and rows that
        were present at ``counter`` and have been removed since."""
        if counter < self.pruned_through:
            raise ValueError(
                f"changes after {counter} are no longer logged (pruned through "
                f"{self.pruned_through}); rebuild from the documents instead"
            )
        db = self._reader()
        db.execute("BEGIN")
        try:
            log = db.execute(
                "SELECT row_id, op FROM changes WHERE seq > ? ORDER BY seq", (counter,)
            ).fetchall()
            now = int(db.execute("SELECT value FROM meta WHERE key = 'counter'").fetchone()[0])
        finally:
            db.execute("COMMIT")
        added: dict[int, None] = {}
        removed: list[int] = []
        for row, op in log:
            if op == "add":
                added[row] = None
            elif row in added:
                del added[row]
            else:
                removed.append(row)
        return ChangeSet(tuple(added), tuple(removed), now)

    def prune_changes(self, through: int) -> None:
        """Forget the log up to ``through``: a snapshot at that counter no longer needs it."""
        with self._transaction() as db:
            db.execute("DELETE FROM changes WHERE seq <= ?", (through,))
            pruned = int(self._meta("pruned_through") or 0)
            self._set_meta("pruned_through", str(max(through, pruned)))

    def close(self) -> None:
        """Close every connection this store opened."""
        with self._connections_lock:
            for connection in self._connections:
                connection.close()
            self._connections.clear()
