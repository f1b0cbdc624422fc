"""The shard format: Parquet files of documents with their full vectors, made by one bundle.

Columns: ``id`` (string), ``text`` (string), ``metadata`` (a JSON object, as a string) and
``vector`` (a fixed-size list of ``float16`` or ``float32``: the full, unnormalised embedding).
The file's key-value metadata ``fractal.shard`` is a JSON :class:`ShardHeader`: format version,
the bundle's name and content hash, ``dim``, ``dtype``, and which records of the corpus the
shard holds (``start``, ``rows``).

A shard is written under a temporary name, fsynced and renamed into place, so a shard under its
final name is complete. :func:`read_shard` reads one whole and checks everything an import relies
on before anything of it is used.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bulk.errors import BulkError, where
from bundle import Manifest
from index.embedded.snapshot import fsync_path

FORMAT_VERSION = 1
HEADER_KEY = b"fractal.shard"
DTYPES = ("float16", "float32")
COLUMNS = ("id", "text", "metadata", "vector")


@dataclass(frozen=True)
class ShardHeader:
    """What a shard holds: vectors of which bundle, their size and type, which corpus records."""

    bundle_name: str
    bundle_hash: str
    dim: int
    dtype: str
    start: int
    """Position in the corpus (from 0) of the shard's first record."""
    rows: int
    format_version: int = FORMAT_VERSION


@dataclass(frozen=True)
class Shard:
    """A validated shard: its header, documents, and vectors as ``float32`` ``(rows, dim)``."""

    path: Path
    header: ShardHeader
    ids: list[str]
    texts: list[str]
    metadata: list[dict]
    vectors: np.ndarray


def shard_name(number: int) -> str:
    """The file name of the ``number``-th shard of a run (from 0)."""
    return f"shard-{number:05d}.parquet"


def write_shard(
    path: Path,
    header: ShardHeader,
    ids: Sequence[str],
    texts: Sequence[str],
    metadata: Sequence[dict],
    vectors: np.ndarray,
) -> None:
    """Write a shard atomically: a temporary file, fsynced, then renamed to ``path``.

    ``vectors`` are ``(rows, dim)`` of ``header.dtype``.
    """
    if vectors.dtype != np.dtype(header.dtype) or vectors.shape != (header.rows, header.dim):
        raise ValueError(
            f"vectors are {vectors.dtype} {vectors.shape}, the header says "
            f"{header.dtype} ({header.rows}, {header.dim})"
        )
    values = pa.array(np.ascontiguousarray(vectors).reshape(-1))
    table = pa.table(
        {
            "id": pa.array(ids, pa.string()),
            "text": pa.array(texts, pa.string()),
            "metadata": pa.array([json.dumps(meta) for meta in metadata], pa.string()),
            "vector": pa.FixedSizeListArray.from_arrays(values, header.dim),
        }
    ).replace_schema_metadata({HEADER_KEY: json.dumps(asdict(header)).encode("utf-8")})
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with temporary.open("wb") as handle:
            pq.write_table(table, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    fsync_path(path.parent)


def _header(path: Path, schema: pa.Schema) -> ShardHeader:
    raw = (schema.metadata or {}).get(HEADER_KEY)
    if raw is None:
        raise BulkError(f"{path}: not a Fractal shard (no {HEADER_KEY.decode()} metadata)")
    try:
        header = ShardHeader(**json.loads(raw))
    except (TypeError, ValueError) as exc:
        raise BulkError(f"{path}: unreadable {HEADER_KEY.decode()} metadata ({exc})") from None
    if header.format_version != FORMAT_VERSION:
        raise BulkError(
            f"{path}: shard format version {header.format_version}; this Fractal reads "
            f"{FORMAT_VERSION}"
        )
    if header.dtype not in DTYPES:
        raise BulkError(f"{path}: vector dtype {header.dtype!r}; expected one of {DTYPES}")
    return header


def _check_bundle(path: Path, header: ShardHeader, manifest: Manifest) -> None:
    if header.bundle_hash != manifest.content_hash:
        raise BulkError(
            f"{path}: made with bundle {header.bundle_name!r} ({header.bundle_hash[:12]}), "
            f"not with {manifest.name!r} ({manifest.content_hash[:12]}); re-embed the corpus "
            "with this bundle"
        )
    if header.dim != manifest.dim:
        raise BulkError(f"{path}: {header.dim}-d vectors, the bundle's are {manifest.dim}-d")


def _first(mask: np.ndarray) -> int:
    """The 1-based row of the first True in ``mask``."""
    return int(np.flatnonzero(mask)[0]) + 1


def _vectors(path: Path, column: pa.Array, header: ShardHeader) -> np.ndarray:
    """The vector column as ``float32 (rows, dim)``, after checking type, sizes and values."""
    if not (pa.types.is_list(column.type) or pa.types.is_fixed_size_list(column.type)):
        raise BulkError(f"{path}: the vector column holds {column.type}, not lists of floats")
    expected = pa.from_numpy_dtype(np.dtype(header.dtype))
    if column.type.value_type != expected:
        raise BulkError(
            f"{path}: vectors of {column.type.value_type}, the header says {header.dtype}"
        )
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    if (lengths != header.dim).any():
        row = _first(lengths != header.dim)
        raise BulkError(
            f"{where(path, row)}: the vector has {lengths[row - 1]} values, the bundle's dim "
            f"is {header.dim}"
        )
    values = column.flatten()
    if values.null_count:
        row = _first(values.is_null().to_numpy(zero_copy_only=False)) // header.dim + 1
        raise BulkError(f"{where(path, row)}: the vector holds a null")
    vectors = values.to_numpy(zero_copy_only=False).reshape(len(column), header.dim)
    finite = np.isfinite(vectors).all(axis=1)
    if not finite.all():
        raise BulkError(f"{where(path, _first(~finite))}: the vector holds NaN or inf")
    return vectors.astype(np.float32)


def _metadata(path: Path, column: list[str]) -> list[dict]:
    metadata = []
    for row, text in enumerate(column, 1):
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise BulkError(f"{where(path, row)}: the metadata is not a JSON object")
        metadata.append(value)
    return metadata


def _check_ids(path: Path, ids: list[str]) -> None:
    seen: dict[str, int] = {}
    for row, doc_id in enumerate(ids, 1):
        if not doc_id.strip():
            raise BulkError(f"{where(path, row)}: the id is empty")
        if doc_id in seen:
            raise BulkError(f"{where(path, row)}: id {doc_id!r} repeats row {seen[doc_id]}")
        seen[doc_id] = row


def read_shard(path: Path, manifest: Manifest) -> Shard:
    """Read a whole shard and check it against ``manifest``'s bundle; :class:`BulkError` names
    the file (and row) of the first problem: not Parquet (truncated, corrupt), not a shard,
    another bundle, missing columns, empty, nulls, wrong dim or dtype, NaN or inf, repeated or
    empty ids, metadata that is not a JSON object."""
    try:
        parquet = pq.ParquetFile(path)
        header = _header(path, parquet.schema_arrow)
        _check_bundle(path, header, manifest)
        missing = [name for name in COLUMNS if name not in parquet.schema_arrow.names]
        if missing:
            raise BulkError(f"{path}: missing column(s) {', '.join(missing)}")
        table = parquet.read(columns=list(COLUMNS)).combine_chunks()
    except (pa.ArrowException, OSError) as exc:
        raise BulkError(
            f"{path}: not a readable Parquet file, truncated or corrupt ({exc})"
        ) from None
    if table.num_rows == 0:
        raise BulkError(f"{path}: the shard is empty")
    if table.num_rows != header.rows:
        raise BulkError(f"{path}: {table.num_rows} rows, its header says {header.rows}")
    for name in COLUMNS:
        column = table.column(name).chunk(0)
        if column.null_count:
            row = _first(column.is_null().to_numpy(zero_copy_only=False))
            raise BulkError(f"{where(path, row)}: the {name} is null")
    for name in ("id", "text", "metadata"):
        if not pa.types.is_string(table.column(name).type):
            raise BulkError(f"{path}: the {name} column holds {table.column(name).type}, not text")
    vectors = _vectors(path, table.column("vector").chunk(0), header)
    ids = table.column("id").to_pylist()
    _check_ids(path, ids)
    return Shard(
        path=path,
        header=header,
        ids=ids,
        texts=table.column("text").to_pylist(),
        metadata=_metadata(path, table.column("metadata").to_pylist()),
        vectors=vectors,
    )
