"""How a Milvus backend indexes and searches each vector field, and how much one request
carries."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from index.faiss_indexes import HnswParams, PqParams

ANN_INDEXES = ("HNSW", "HNSW_SQ", "IVF_FLAT", "IVF_SQ8")

# Request sizes, read when each request is made.
UPSERT_CHUNK = 1_000
"""Documents per upsert request: a 384-d document with four prefix fields is about 6 KB, so a
chunk stays far below gRPC's message limit."""
READ_CHUNK = 1_000
"""Keys per read (an ``in`` expression)."""
C2F_ROWS_PER_SEARCH = 16_384
"""Shortlisted rows (each with its full vector) one C2F search request returns at most: 16 MB
of 256-d vectors, far below gRPC's message limit; more queries are sent in several requests."""


@dataclass(frozen=True)
class MilvusParams:
    """How fields are indexed and searched: the type behind kind ``hnsw``, the HNSW and PQ
    parameters of the service's settings, IVF lists and probes, and every call's deadline."""

    ann_index: str = "HNSW"
    hnsw: HnswParams = field(default_factory=HnswParams)
    pq: PqParams = field(default_factory=PqParams)
    nlist: int = 1024
    nprobe: int = 32
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.ann_index not in ANN_INDEXES:
            raise ValueError(f"ann_index must be one of {', '.join(ANN_INDEXES)}")

    def index(self, kind: str, dim: int) -> tuple[str, dict[str, Any]]:
        """The Milvus index type and build parameters of an index kind."""
        if kind == "exact":
            return "FLAT", {}
        if kind == "pq":
            self.pq.check_dim(dim)
            return "IVF_PQ", {"nlist": self.nlist, "m": self.pq.m, "nbits": self.pq.nbits}
        if self.ann_index.startswith("HNSW"):
            built = {"M": self.hnsw.m, "efConstruction": self.hnsw.ef_construction}
            return self.ann_index, built | ({"sq_type": "SQ8"} if "SQ" in self.ann_index else {})
        return self.ann_index, {"nlist": self.nlist}

    def search(self, kind: str, k: int, ef_search: int | None) -> dict[str, Any]:
        """The search parameters of an index kind for ``k`` results."""
        if kind == "exact":
            params: dict[str, Any] = {}
        elif kind == "hnsw" and self.ann_index.startswith("HNSW"):
            params = {"ef": max(ef_search or self.hnsw.ef_search, k)}
        else:
            params = {"nprobe": self.nprobe}
        return {"metric_type": "IP", "params": params}
