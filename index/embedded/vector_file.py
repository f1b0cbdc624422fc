"""The full unit vectors on disk: one memory-mapped matrix, one row per store row id.

C2F re-ranks a shortlist from here, and every index is (re)built from here, so the
full-precision vectors never sit in anonymous memory: the pages are file-backed, and the kernel
keeps in RAM only those a search touched recently. Rows are float32 (exact re-rank) or float16
(half the disk and page cache, cosines within ~1e-3).

The file is a FAISS index file: a flat inner-product index (``IndexFlatIP`` for float32,
``IndexScalarQuantizer`` ``QT_fp16`` for float16, whose codes are the rows' float16 bytes) whose
vectors are the rows, one slot per row id up to the file's capacity (rows not written yet are
zeros). FAISS maps it read-only (``IO_FLAG_MMAP_IFC``): :attr:`VectorFile.refine` scores row ids
inside native code (the C2F re-rank, :mod:`index.funnel`), and :meth:`VectorFile.gather` reads
the same mapping as a numpy view, so the process maps the file once. Rows are written with
``pwrite``; the kernel's page cache makes them visible through the mapping at once.

The file is derived from the store of record, like the indexes. ``vectors.json`` records the
state it vouches for: the store's id, the change counter, how many rows, and the sha256 of those
rows' bytes. On open, a file that matches is mapped and caught up with the store's change log; a
missing, foreign, stale or corrupted one (its checksum differs) is rebuilt from the store.

The file's blocks are allocated when it grows (``posix_fallocate``), not left as holes: writing a
row through the mapping then never needs new disk space, which on a full disk would be a
``SIGBUS`` instead of an error. :meth:`VectorFile.reserve` grows it before the store commits a
write, so a full disk refuses the write (:class:`index.backend.StorageFull`) with nothing stored.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import faiss
import numpy as np

from index.backend import RowCorrupt, StorageFull, is_disk_full
from index.embedded.store import Store
from index.vectors import unit_rows

DATA_FILE = "vectors.f{bits}"
RECORD_FILE = "vectors.json"
FORMAT = 2
DTYPES = {"float32": np.float32, "float16": np.float16}
MIN_CAPACITY = 1024
REBUILD_CHUNK = 50_000
"""Rows read from the store per step of a rebuild: bounded memory at any corpus size."""
HASH_BLOCK = 64 << 20


@dataclass(frozen=True)
class VectorFileRecord:
    """What ``vectors.json`` says the data file holds."""

    format: int
    store_id: str
    dim: int
    dtype: str
    counter: int
    rows: int
    sha256: str


@dataclass(frozen=True)
class VectorFileRecovery:
    """How opening went: ``mapped`` (the record matched; ``caught_up`` rows written since) or
    ``rebuilt`` (and why), how many rows were written from the store, and the documents whose
    stored vectors failed their checksum (written as zeros, so they match no query; reading
    such a document answers :class:`~index.backend.RowCorrupt` until it is upserted again)."""

    action: str
    reason: str | None
    rows_written: int
    corrupt: tuple[str, ...] = ()


def _flat_index(dim: int, dtype: str) -> faiss.Index:
    """An empty FAISS inner-product index whose codes are rows of ``dtype``."""
    if dtype == "float32":
        return faiss.IndexFlatIP(dim)
    fp16 = faiss.ScalarQuantizer.QT_fp16
    return faiss.IndexScalarQuantizer(dim, fp16, faiss.METRIC_INNER_PRODUCT)  # type: ignore[arg-type]


def _header(dim: int, dtype: str, capacity: int) -> bytes:
    """The bytes FAISS writes before the codes of a ``capacity``-row flat index of ``dtype``
    rows. FAISS's index header holds ``ntotal`` as the int64 after the fourcc and ``d``, and the
    code vector's length (in FAISS's unit for that index) is the header's last int64; the unit is
    read off a one-row index, so this follows FAISS's own writer."""
    empty = bytearray(faiss.serialize_index(_flat_index(dim, dtype)).tobytes())
    one = _flat_index(dim, dtype)
    one.add(np.zeros((1, dim), dtype=np.float32))
    row_units = int(
        np.frombuffer(faiss.serialize_index(one).tobytes()[len(empty) - 8 :][:8], np.int64)[0]
    )
    empty[8:16] = np.int64(capacity).tobytes()
    empty[-8:] = np.int64(capacity * row_units).tobytes()
    return bytes(empty)


def _sha256(data: np.ndarray) -> str:
    digest = hashlib.sha256()
    raw = data.reshape(-1).view(np.uint8)
    for start in range(0, len(raw), HASH_BLOCK):
        digest.update(raw[start : start + HASH_BLOCK].data)
    return digest.hexdigest()


class VectorFile:
    """Unit vectors by row id in ``directory``; not thread-safe: the caller locks (reads may
    run together; :meth:`write` and :meth:`save` need exclusive access)."""

    def __init__(self, directory: Path, dim: int, dtype: str = "float32") -> None:
        if dtype not in DTYPES:
            raise ValueError(f"full vectors dtype must be {' or '.join(DTYPES)}, got {dtype!r}")
        self.directory = directory
        self.dim = dim
        self.dtype = dtype
        self._numpy_dtype = np.dtype(DTYPES[dtype])
        self.path = directory / DATA_FILE.format(bits=self._numpy_dtype.itemsize * 8)
        self.record_path = directory / RECORD_FILE
        self.data_offset = len(_header(dim, dtype, 0))
        """Where row 0 starts in the file (after FAISS's header)."""
        self.refine: faiss.Index | None = None
        """The file as a FAISS flat index over its capacity (None before any row is written)."""
        self._matrix = np.zeros((0, dim), dtype=self._numpy_dtype)
        self._rows = 0  # one past the highest row id written

    # -- opening -----------------------------------------------------------------------------

    def open(self, store: Store) -> VectorFileRecovery:
        """Map the file and catch it up with ``store``, or rebuild it from ``store``."""
        problem = self._check(store)
        corrupt: list[str] = []

        def note(damaged: RowCorrupt) -> None:
            corrupt.append(damaged.doc_id)

        if problem is None:
            record = self._read_record()
            assert record is not None
            changes = store.changes_since(record.counter)
            added = np.array(changes.added, dtype=np.int64)
            for start in range(0, len(added), REBUILD_CHUNK):
                rows = added[start : start + REBUILD_CHUNK]
                self.write(rows, unit_rows(store.vectors_of(rows, note)))
            return VectorFileRecovery("mapped", None, len(added), tuple(corrupt))
        self._remove()
        written = 0
        for rows, vectors in store.iter_vectors(REBUILD_CHUNK, note):
            self.write(rows, unit_rows(vectors))
            written += len(rows)
        return VectorFileRecovery("rebuilt", problem, written, tuple(corrupt))

    def _read_record(self) -> VectorFileRecord | None:
        try:
            return VectorFileRecord(**json.loads(self.record_path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            return None

    def _check(self, store: Store) -> str | None:
        """Why the file on disk cannot be used as it is (None when it can; it is then mapped)."""
        record = self._read_record()
        if record is None:
            return f"no readable {RECORD_FILE}"
        expected = (FORMAT, store.store_id, self.dim, self.dtype)
        if (record.format, record.store_id, record.dim, record.dtype) != expected:
            return f"{RECORD_FILE} describes another format, store, dim or dtype"
        if record.counter < store.pruned_through:
            return "the store's change log no longer reaches back to the file's state"
        if not self.path.is_file():
            return f"{self.path.name} is missing"
        capacity = max(0, self.path.stat().st_size - self.data_offset) // self.row_bytes
        with self.path.open("rb") as file:
            if file.read(self.data_offset) != _header(self.dim, self.dtype, capacity):
                return f"{self.path.name} does not start with the header of its {capacity:,} rows"
        self._map(capacity)
        if len(self._matrix) < record.rows:
            return f"{self.path.name} is shorter than the {record.rows:,} rows it should hold"
        if _sha256(self._matrix[: record.rows]) != record.sha256:
            return f"{self.path.name} does not match its checksum (corrupted)"
        self._rows = record.rows
        return None

    def _remove(self) -> None:
        self.refine = None
        self._matrix = np.zeros((0, self.dim), dtype=self._numpy_dtype)
        self._rows = 0
        self.record_path.unlink(missing_ok=True)
        self.path.unlink(missing_ok=True)

    # -- the matrix --------------------------------------------------------------------------

    @property
    def written_rows(self) -> int:
        """One past the highest row id written: rows below it hold their vectors (rows are
        written in ascending order, so a row an upsert has not reached yet is above it)."""
        return self._rows

    @property
    def row_bytes(self) -> int:
        return self.dim * self._numpy_dtype.itemsize

    def _allocate(self, capacity: int) -> None:
        """Extend the file with zeros to ``capacity`` rows, every block allocated on disk (holes
        left by an older version included), and write the header that says so;
        :class:`StorageFull` when the disk cannot hold them, the file unchanged."""
        with self.path.open("ab") as file:
            try:
                os.posix_fallocate(file.fileno(), 0, self.data_offset + capacity * self.row_bytes)
            except OSError as exc:
                if is_disk_full(exc):
                    raise StorageFull(self.directory, exc) from exc
                raise
        descriptor = os.open(self.path, os.O_WRONLY)
        try:
            os.pwrite(descriptor, _header(self.dim, self.dtype, capacity), 0)
        finally:
            os.close(descriptor)

    def _capacity_for(self, end: int) -> int:
        """The rows the file grows to when row ``end - 1`` is written: doubling."""
        return max(end, 2 * len(self._matrix), MIN_CAPACITY)

    def reserve(self, end: int) -> None:
        """Allocate the rows below ``end`` before they are written, so that writing them cannot
        fail for lack of space. The mapping is unchanged (searches may go on):
        :meth:`write` maps the new rows."""
        if end > len(self._matrix):
            self._allocate(self._capacity_for(end))

    def _map(self, capacity: int) -> None:
        """Map ``capacity`` rows of the file (allocated first, see :meth:`_allocate`) through
        FAISS, and view the same pages as the read-only matrix."""
        self._allocate(capacity)
        refine = faiss.read_index(str(self.path), faiss.IO_FLAG_MMAP_IFC)
        codes = refine.codes  # type: ignore[attr-defined]  # a flat index's code vector
        if capacity:
            raw = faiss.rev_swig_ptr(codes.data(), capacity * self.row_bytes)
            matrix = raw.view(self._numpy_dtype).reshape(capacity, self.dim)
        else:
            matrix = np.zeros((0, self.dim), dtype=self._numpy_dtype)
        matrix.flags.writeable = False  # FAISS maps the file read-only
        self.refine, self._matrix = refine, matrix

    def write(self, rows: np.ndarray, unit_vectors: np.ndarray) -> None:
        """Store the unit vectors of these row ids (growing the file by doubling), one
        ``pwrite`` per run of consecutive rows."""
        if not len(rows):
            return
        end = int(rows.max()) + 1
        if end > len(self._matrix):
            self._map(self._capacity_for(end))
        data = np.ascontiguousarray(unit_vectors, dtype=self._numpy_dtype)
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1
        descriptor = os.open(self.path, os.O_WRONLY)
        try:
            for run in np.split(np.arange(len(rows)), breaks):
                offset = self.data_offset + int(rows[run[0]]) * self.row_bytes
                os.pwrite(descriptor, data[run[0] : run[-1] + 1].tobytes(), offset)
        finally:
            os.close(descriptor)
        self._rows = max(self._rows, end)

    def gather(self, rows: np.ndarray, columns: int | None = None) -> np.ndarray:
        """The unit vectors of these row ids as float32, one row each; with ``columns``, only
        their first ``columns`` values (only those bytes are read: a 64-d prefix of 256-d
        float32 rows touches 4 of their 16 cache lines)."""
        if columns is None or columns >= self.dim:
            return np.asarray(self._matrix[rows], dtype=np.float32)
        return np.asarray(self._matrix[rows, :columns], dtype=np.float32)

    # -- persistence -------------------------------------------------------------------------

    def save(self, counter: int, store_id: str) -> None:
        """Flush the file and record (atomically) that it reflects the store at ``counter``."""
        if self.path.is_file():
            descriptor = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
        record = VectorFileRecord(
            FORMAT,
            store_id,
            self.dim,
            self.dtype,
            counter,
            self._rows,
            _sha256(self._matrix[: self._rows]),
        )
        temporary = self.record_path.with_suffix(".tmp")
        temporary.write_text(json.dumps(asdict(record), indent=2) + "\n", encoding="utf-8")
        os.replace(temporary, self.record_path)

    def stats(self) -> dict:
        """The file's dtype and size on disk."""
        return {
            "dtype": self.dtype,
            "file": self.path.name,
            "bytes_on_disk": self.data_offset + len(self._matrix) * self.row_bytes,
        }
