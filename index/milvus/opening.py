"""Opening a Milvus collection: its vector fields named from the layout, the collection
created with them (its Fractal record written last), or an existing one checked against the
record, and loaded."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from index.backend import BackendUnavailable, CollectionMissing
from index.checks import check_count, check_layout
from index.faiss_indexes import KINDS
from index.fragments import check_fragment_dim
from index.milvus.connection import PROPERTY, MilvusConnection, NotLoaded, T, stored_record
from index.milvus.params import MilvusParams

if TYPE_CHECKING:
    from pymilvus import MilvusClient

KEY = "key"
FULL = "full"
FILTERABLE = "filterable"
MAX_KEY_CHARS = 4_096
"""The hex key of an id of at most 2,048 bytes of UTF-8."""
MAX_TEXT_BYTES = 65_535
"""Milvus's VARCHAR limit, for the text and for the metadata's JSON text."""
RECORD_POLL_S = 0.1
"""How often a collection another replica is creating is asked for its record."""


def key_of(doc_id: str) -> str:
    return doc_id.encode("utf-8").hex()


def id_of(key: str) -> str:
    return bytes.fromhex(key).decode("utf-8")


def keys_expression(keys: Sequence[str]) -> str:
    return f"{KEY} in [{', '.join(f'{chr(34)}{key}{chr(34)}' for key in keys)}]"


@dataclass(frozen=True)
class VectorField:
    """One vector field: its name, scoring, prefix dimension and index kind."""

    name: str
    scoring: str
    dim: int
    kind: str


class Opening:
    """Opens the collection (:class:`index.milvus.MilvusCollection`'s constructor), and the
    schema and calls every operation uses."""

    def __init__(
        self,
        connection: MilvusConnection,
        name: str,
        *,
        dim: int,
        prefix_dims: Sequence[int],
        layout: dict[int, tuple[str, ...]],
        record: dict[str, Any],
        params: MilvusParams | None = None,
        fragment_dim: int | None = None,
        create: bool = True,
    ) -> None:
        check_count(dim, "dim")
        self.connection = connection
        self.name = name
        self.dim = dim
        self.prefix_dims = tuple(sorted(set(prefix_dims)))
        self.layout = check_layout(layout, self.prefix_dims)
        self.index_kinds = tuple(k for k in KINDS if any(k in v for v in self.layout.values()))
        self.fragment_dim = fragment_dim
        if fragment_dim is not None:
            for prefix_dim in self.prefix_dims:
                check_fragment_dim(prefix_dim, fragment_dim)
        self.params = params or MilvusParams()
        self.record = {**record, "dim": dim, "fields": [asdict(f) for f in self._fields()]}
        self.opened_with_work = False
        self._ingest_seconds = {"store": 0.0, "full_vectors": 0.0, "indexes": 0.0}
        if "pq" in self.index_kinds and "lite" in connection.server_version().lower():
            raise ValueError(
                f"index kind 'pq' needs IVF_PQ, which the Milvus server at {connection.uri} "
                f"({connection.server_version()}) does not build (milvus-lite builds no PQ "
                "index); use the kinds exact and hnsw, or Milvus standalone or distributed"
            )
        exists = self._call("has_collection", lambda c: c.has_collection(name))
        if exists:
            self._check_record()
        elif create:
            self._create()
        else:
            raise CollectionMissing(f"collection {name!r} does not exist in Milvus")
        self._call("load_collection", lambda c: c.load_collection(name))

    def _fields(self) -> list[VectorField]:
        """``full``, then one field per (scoring, prefix, kind) other than the exact index at
        the full dimension, which ``full`` is."""
        scorings = ("cosine", "sfs") if self.fragment_dim is not None else ("cosine",)
        fields = [VectorField(FULL, "cosine", self.dim, "exact")]
        for scoring in scorings:
            for prefix_dim, kinds in self.layout.items():
                for kind in kinds:
                    if (scoring, prefix_dim, kind) != ("cosine", self.dim, "exact"):
                        name = f"{scoring}_{prefix_dim}_{kind}"
                        fields.append(VectorField(name, scoring, prefix_dim, kind))
        return fields

    def _field(self, scoring: str, dim: int, kind: str) -> VectorField:
        for candidate in self._fields():
            if (candidate.scoring, candidate.dim, candidate.kind) == (scoring, dim, kind):
                return candidate
        served = ", ".join(f"{f.scoring}-{f.dim}-{f.kind}" for f in self._fields())
        raise ValueError(
            f"no {kind!r} index for scoring {scoring!r} at dim {dim!r}; served: {served}"
        )

    def _create(self) -> None:
        from pymilvus import DataType, MilvusClient

        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field(KEY, DataType.VARCHAR, is_primary=True, max_length=MAX_KEY_CHARS)
        schema.add_field("text", DataType.VARCHAR, max_length=MAX_TEXT_BYTES)
        schema.add_field("metadata", DataType.VARCHAR, max_length=MAX_TEXT_BYTES)
        schema.add_field(FILTERABLE, DataType.JSON)
        indexes = MilvusClient.prepare_index_params()
        for vector in self._fields():
            schema.add_field(vector.name, DataType.FLOAT_VECTOR, dim=vector.dim)
            index_type, built = self.params.index(vector.kind, vector.dim)
            indexes.add_index(vector.name, index_type=index_type, metric_type="IP", params=built)
        try:
            self._call(
                "create_collection",
                lambda c: c.create_collection(
                    self.name, schema=schema, index_params=indexes, consistency_level="Strong"
                ),
            )
        except BackendUnavailable:
            if not self._call("has_collection", lambda c: c.has_collection(self.name)):
                raise
            self._check_record()  # another replica created it first: its record decides
            return
        # The record is written last: until it is there, the collection is being created.
        self._call(
            "alter_collection_properties",
            lambda c: c.alter_collection_properties(
                self.name, properties={PROPERTY: json.dumps(self.record, sort_keys=True)}
            ),
        )

    def _check_record(self) -> None:
        """Refuse a collection with another bundle's record or another layout. One without a
        record is being created by another replica (the record is its last step): its record
        is waited for, up to a call's deadline, before the collection is refused as not
        Fractal's."""
        deadline = time.monotonic() + self.params.timeout_s
        while (found := stored_record(self.connection, self.name)) is None:
            if time.monotonic() >= deadline:
                break
            time.sleep(RECORD_POLL_S)
        if found is None:
            raise ValueError(
                f"Milvus collection {self.name!r} was not made by Fractal (it has no "
                f"{PROPERTY} property); use another FRACTAL_MILVUS_PREFIX"
            )
        if found.get("bundle_hash") != self.record.get("bundle_hash"):
            raise ValueError(
                f"Milvus collection {self.name!r} holds vectors of bundle "
                f"{found.get('bundle')!r} ({str(found.get('bundle_hash'))[:12]}), not of the "
                f"served bundle {self.record.get('bundle')!r} "
                f"({str(self.record.get('bundle_hash'))[:12]}); use another "
                "FRACTAL_MILVUS_PREFIX or re-ingest"
            )
        if found.get("fields") != self.record["fields"]:
            have = ", ".join(f["name"] for f in found.get("fields", []))
            want = ", ".join(f["name"] for f in self.record["fields"])
            raise ValueError(
                f"Milvus collection {self.name!r} has the vector fields {have}, the settings "
                f"need {want} (index kinds, SFS or the shortlist prefix changed); use another "
                "FRACTAL_MILVUS_PREFIX or the settings it was made with"
            )

    def _call(self, operation: str, action: Callable[[MilvusClient], T]) -> T:
        """A call on this collection; one that finds it not loaded loads it and tries again."""
        try:
            return self.connection.call(operation, action)
        except NotLoaded:
            self.connection.call("load_collection", lambda c: c.load_collection(self.name))
            return self.connection.call(operation, action)
