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
row never needs new disk space, which on a full disk would fail after the store committed.
:meth:`VectorFile.reserve` grows it before the store commits a write, so a full disk refuses the
write (:class:`index.backend.StorageFull`) with nothing stored.

Row ids are never reused, so a replaced or deleted document leaves its slot behind. Each
:meth:`VectorFile.save` gives those slots' disk back: every run of removed rows that covers whole
file blocks (see :data:`MAX_HOLES`) is punched out of the file (``fallocate``
``PUNCH_HOLE``; it then reads as zeros, and the file keeps its size). The record lists these
holes and its checksum skips them, so punching never makes a sound file look corrupted; it lists
them before they are punched, so a crash between the two leaves a file that still matches, and
opening punches them again. A file system that cannot punch holes keeps the blocks.

Hashing reads the file with ``read`` calls, not through the mapping: the process maps no page of
the file that a search did not touch, so its resident memory shows what searches use, not the
whole file after every snapshot.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import logging
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import faiss
import numpy as np

from index.backend import RowCorrupt, StorageFull, is_disk_full
from index.embedded.store import Store
from index.native_funnel import rows_of
from index.vectors import unit_rows

DATA_FILE = "vectors.f{bits}"
RECORD_FILE = "vectors.json"
FORMAT = 2
DTYPES = {"float32": np.float32, "float16": np.float16}
MIN_CAPACITY = 1024
GROWTH = 8
MAX_HEADROOM_BYTES = 4 << 20
"""The most disk allocated ahead of the rows written. A file that grew with its size would keep
growing under replacements, whose old rows' disk is given back (holes) while the file's size
stays. A remap costs well under a millisecond, and the rows that fill 4 MiB take seconds to
index, so growing by at most this much costs nothing measurable."""
REBUILD_CHUNK = 50_000
"""Rows read from the store per step of a rebuild: bounded memory at any corpus size."""
HASH_BLOCK = 1 << 20
"""Bytes read per step while hashing the file: a small buffer, reused (no memory spike)."""
_EMPTY_SHA256 = hashlib.sha256().hexdigest()
BLOCK_BYTES = 4096
"""The file system block: holes are punched in whole blocks, so no live row's bytes are in one."""
MAX_HOLES = 1 << 16
"""At most this many holes in a record (about 1.5 MB of JSON): a hole is at least one block,
and at least 1/65,536 of the file, so a large file with scattered removals keeps a short record
(its smaller runs keep their blocks)."""
_PUNCH_HOLE = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE (linux/falloc.h)
log = logging.getLogger(__name__)

Hole = tuple[int, int]
"""A byte range ``[start, end)`` of the file, whole blocks, punched out."""


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
    holes: tuple[Hole, ...] = ()
    """Byte ranges of the file punched out (only removed rows in them), skipped by ``sha256``."""


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


def _segments(start: int, end: int, holes: tuple[Hole, ...]) -> list[Hole]:
    """The byte ranges of ``[start, end)`` outside ``holes`` (sorted, disjoint), in order."""
    segments, position = [], start
    for hole_start, hole_end in holes:
        if hole_start > position:
            segments.append((position, min(hole_start, end)))
        position = max(position, hole_end)
    if position < end:
        segments.append((position, end))
    return [(lo, hi) for lo, hi in segments if hi > lo]


def _punch(descriptor: int, holes: tuple[Hole, ...]) -> None:
    """Give the disk blocks of ``holes`` back (Linux ``fallocate``); where the system or the
    file system cannot, they are kept, which loses nothing but the space."""
    if not holes or not sys.platform.startswith("linux"):
        return
    fallocate = ctypes.CDLL(None, use_errno=True).fallocate
    fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    for start, end in holes:
        if fallocate(descriptor, _PUNCH_HOLE, start, end - start) != 0:
            code = ctypes.get_errno()
            log.info("holes not punched in the full vectors: %s", errno.errorcode.get(code, code))
            return


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
            fields = json.loads(self.record_path.read_text(encoding="utf-8"))
            fields["holes"] = tuple((int(lo), int(hi)) for lo, hi in fields.get("holes", ()))
            return VectorFileRecord(**fields)
        except (OSError, ValueError, TypeError, AttributeError):
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
        if capacity < record.rows:
            return f"{self.path.name} is shorter than the {record.rows:,} rows it should hold"
        if self._sha256(record.rows, record.holes) != record.sha256:
            return f"{self.path.name} does not match its checksum (corrupted)"
        self._map(capacity, record.rows)
        self._rows = record.rows
        self._punch(record.holes)  # again: a crash may have come between record and punch
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

    def _allocate(self, capacity: int, written: int) -> None:
        """Extend the file with zeros to ``capacity`` rows, every block from row ``written`` on
        allocated on disk (the rows to come; below it rows hold their vectors or were removed,
        and may lie in punched holes), and write the header that says so;
        :class:`StorageFull` when the disk cannot hold them, the file unchanged."""
        start = self.data_offset + written * self.row_bytes if written else 0
        end = self.data_offset + capacity * self.row_bytes
        with self.path.open("ab") as file:
            try:
                if end > start:
                    os.posix_fallocate(file.fileno(), start, end - start)
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
        """The rows the file grows to when row ``end - 1`` is written: by an eighth, and by at
        most :data:`MAX_HEADROOM_BYTES` beyond ``end``."""
        headroom = min(len(self._matrix) // GROWTH, MAX_HEADROOM_BYTES // self.row_bytes)
        return max(end, min(len(self._matrix) + headroom, end + headroom), MIN_CAPACITY)

    def reserve(self, end: int) -> None:
        """Allocate the rows below ``end`` before they are written, so that writing them cannot
        fail for lack of space. The mapping is unchanged (searches may go on):
        :meth:`write` maps the new rows."""
        if end > len(self._matrix):
            self._allocate(self._capacity_for(end), self._rows)

    def _map(self, capacity: int, written: int) -> None:
        """Map ``capacity`` rows of the file (allocated first from row ``written`` on, see
        :meth:`_allocate`) through FAISS, and view the same pages as the read-only matrix."""
        self._allocate(capacity, written)
        refine = faiss.read_index(str(self.path), faiss.IO_FLAG_MMAP_IFC)
        matrix = rows_of(refine)  # read-only: FAISS maps the file read-only
        assert matrix.shape == (capacity, self.dim) and matrix.dtype == self._numpy_dtype
        self.refine, self._matrix = refine, matrix

    def write(self, rows: np.ndarray, unit_vectors: np.ndarray) -> None:
        """Store the unit vectors of these row ids (growing the file: :meth:`_capacity_for`),
        one ``pwrite`` per run of consecutive rows."""
        if not len(rows):
            return
        end = int(rows.max()) + 1
        if end > len(self._matrix):
            self._map(self._capacity_for(end), self._rows)
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

    def _sha256(self, rows: int, holes: tuple[Hole, ...]) -> str:
        """The sha256 of the first ``rows`` rows' bytes outside ``holes``, read from the file."""
        digest = hashlib.sha256()
        buffer = memoryview(bytearray(HASH_BLOCK))
        end = self.data_offset + rows * self.row_bytes
        with self.path.open("rb", buffering=0) as file:
            for start, stop in _segments(self.data_offset, end, holes):
                file.seek(start)
                while start < stop:
                    read = file.readinto(buffer[: min(HASH_BLOCK, stop - start)])
                    if not read:
                        raise OSError(f"{self.path} ends at byte {start:,}, before {stop:,}")
                    digest.update(buffer[:read])
                    start += read
        return digest.hexdigest()

    def _holes(self, live: np.ndarray) -> tuple[Hole, ...]:
        """The byte ranges of whole blocks that hold only rows written and since removed: those
        not in ``live`` (every present row, ascending); none smaller than 1/:data:`MAX_HOLES`
        of the file."""
        kept = live[live < self._rows]
        bounds = np.concatenate(([-1], kept, [self._rows]))
        first, last = bounds[:-1] + 1, bounds[1:]  # each run of removed rows: [first, last)
        start = self.data_offset + first * self.row_bytes
        end = self.data_offset + last * self.row_bytes
        start = -(-start // BLOCK_BYTES) * BLOCK_BYTES  # whole blocks inside the run
        end = end // BLOCK_BYTES * BLOCK_BYTES
        smallest = max(BLOCK_BYTES, (self.data_offset + self._rows * self.row_bytes) // MAX_HOLES)
        wide = end - start >= smallest
        return tuple(zip(start[wide].tolist(), end[wide].tolist(), strict=True))

    def _punch(self, holes: tuple[Hole, ...]) -> None:
        descriptor = os.open(self.path, os.O_WRONLY)
        try:
            _punch(descriptor, holes)
        finally:
            os.close(descriptor)

    def save(self, counter: int, store_id: str, live: np.ndarray) -> None:
        """Flush the file and record (atomically) that it reflects the store at ``counter``,
        whose present rows are ``live`` (ascending); then punch out the blocks of removed rows
        (see the module docstring). No write may run meanwhile (searches may)."""
        if self.path.is_file():
            descriptor = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
        holes = self._holes(live) if self.path.is_file() else ()
        digest = self._sha256(self._rows, holes) if self.path.is_file() else _EMPTY_SHA256
        record = VectorFileRecord(
            FORMAT, store_id, self.dim, self.dtype, counter, self._rows, digest, holes
        )
        temporary = self.record_path.with_suffix(".tmp")
        temporary.write_text(json.dumps(asdict(record)) + "\n", encoding="utf-8")
        os.replace(temporary, self.record_path)
        if holes:
            self._punch(holes)

    def stats(self) -> dict:
        """The file's dtype, its size, and the disk it takes (less, by the holes punched)."""
        try:
            allocated = self.path.stat().st_blocks * 512
        except OSError:
            allocated = 0
        return {
            "dtype": self.dtype,
            "file": self.path.name,
            "bytes_on_disk": self.data_offset + len(self._matrix) * self.row_bytes,
            "bytes_allocated": allocated,
        }
