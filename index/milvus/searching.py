"""Reading a Milvus collection: documents by key, single-field searches, C2F (the shortlist
returned with its full vectors and re-ranked exactly here), and its figures."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from index.checks import check_count
from index.filters import Filter
from index.fragments import in_space
from index.milvus import params
from index.milvus.filters import expression
from index.milvus.opening import (
    FILTERABLE,
    FULL,
    KEY,
    Opening,
    VectorField,
    id_of,
    key_of,
    keys_expression,
)
from index.rerank import rerank
from index.types import (
    CollectionStats,
    Contents,
    Filtering,
    Hit,
    IndexStats,
    SearchResult,
    ServerRecovery,
    Timings,
    parse_metadata,
)
from index.vectors import as_matrix, prefix_unit, unit_rows

if TYPE_CHECKING:
    from pymilvus import MilvusClient


class Searching(Opening):
    """Reads, all with Strong consistency."""

    def _read(self, doc_ids: Sequence[str], fields: list[str]) -> dict[str, dict]:
        """Stored rows by key, read :data:`params.READ_CHUNK` keys at a time."""
        found: dict[str, dict] = {}
        keys = list(dict.fromkeys(key_of(doc_id) for doc_id in doc_ids))
        for start in range(0, len(keys), params.READ_CHUNK):
            chunk = keys[start : start + params.READ_CHUNK]

            def query(client: MilvusClient, chunk: list[str] = chunk) -> list[dict]:
                return client.query(
                    self.name,
                    filter=keys_expression(chunk),
                    output_fields=[KEY, *fields],
                    limit=len(chunk),
                    consistency_level="Strong",
                )

            rows = self._call("query", query)
            found.update((row[KEY], row) for row in rows)
        return found

    def contents_of(self, doc_ids: Sequence[str]) -> list[Contents | None]:
        rows = self._read(doc_ids, ["text", "metadata"])
        contents: list[Contents | None] = []
        for doc_id in doc_ids:
            row = rows.get(key_of(doc_id))
            contents.append(
                None
                if row is None
                else Contents(doc_id, row["text"], parse_metadata(row["metadata"]))
            )
        return contents

    def present(self, doc_ids: Sequence[str]) -> set[str]:
        return {id_of(key) for key in self._read(doc_ids, [])}

    def _search_rows(
        self,
        vector: VectorField,
        queries: np.ndarray,
        k: int,
        ef_search: int | None,
        where: Filter | None,
        fields: Sequence[str] = (),
    ) -> list[list[Any]]:
        """One search of ``vector``'s field for ``queries`` (already in its space): per query,
        Milvus's hits, each with its key, its distance and ``fields``."""
        condition = "" if where is None else expression(where, FILTERABLE)
        return self._call(
            "search",
            lambda c: c.search(
                self.name,
                data=queries.tolist(),
                anns_field=vector.name,
                limit=k,
                filter=condition,
                search_params=self.params.search(vector.kind, k, ef_search),
                output_fields=[KEY, *fields],
                consistency_level="Strong",
            ),
        )

    @staticmethod
    def _hit(found: Any, score: float, contents: bool) -> Hit:
        """A hit from one of Milvus's search results (its text and metadata with ``contents``)."""
        doc_id = id_of(found[KEY])
        if not contents:
            return Hit(doc_id, score)
        return Hit(
            doc_id, score, Contents(doc_id, found["text"], parse_metadata(found["metadata"]))
        )

    @staticmethod
    def _filtering(where: Filter | None) -> Filtering | None:
        """A filtered search's report: Milvus applies the filter and does not say how many
        documents it matched."""
        return None if where is None else {"mode": "milvus", "matching": None}

    def search(
        self,
        query_vectors: np.ndarray,
        k: int,
        dim: int,
        kind: str = "exact",
        scoring: str = "cosine",
        *,
        ef_search: int | None = None,
        where: Filter | None = None,
        contents: bool = False,
    ) -> SearchResult:
        """The ``k`` best documents per query from one field (see
        :meth:`index.Collection.search`; a filtered search's ``filtering`` says ``milvus``).
        With ``contents``, Milvus returns the hits' text and metadata with them."""
        vector = self._field(scoring, dim, kind)
        k = check_count(k, "k")
        queries = as_matrix(query_vectors, sorted({dim, self.dim}), "query_vectors")
        started = time.perf_counter()
        fields = ["text", "metadata"] if contents else []
        rows = self._search_rows(
            vector, in_space(scoring, dim, queries, self.fragment_dim), k, ef_search, where, fields
        )
        hits = [[self._hit(hit, float(hit["distance"]), contents) for hit in row] for row in rows]
        timings: Timings = {"search": time.perf_counter() - started}
        return SearchResult(hits, timings, self._filtering(where))

    def search_c2f(
        self,
        query_vectors: np.ndarray,
        k: int,
        shortlist_dim: int,
        factor: int = 4,
        kind: str = "exact",
        *,
        ef_search: int | None = None,
        where: Filter | None = None,
        contents: bool = False,
    ) -> SearchResult:
        """Coarse-to-fine: ``k × factor`` from the shortlist prefix's field (filtered there),
        returned with their ``full`` vectors (and with ``contents`` their text and metadata),
        re-ranked exactly (:func:`index.rerank.rerank`)."""
        vector = self._field("cosine", shortlist_dim, kind)
        k = check_count(k, "k")
        shortlist_k = k * check_count(factor, "factor")
        queries = as_matrix(query_vectors, (self.dim,), "query_vectors")
        prefixes = prefix_unit(queries, shortlist_dim)
        per_search = max(1, params.C2F_ROWS_PER_SEARCH // shortlist_k)
        started = time.perf_counter()
        shortlists: list[list[Any]] = []
        for start in range(0, len(queries), per_search):
            shortlists += self._search_rows(
                vector,
                prefixes[start : start + per_search],
                shortlist_k,
                ef_search,
                where,
                [FULL, "text", "metadata"] if contents else [FULL],
            )
        shortlisted = time.perf_counter()
        scores, positions = rerank(
            unit_rows(queries),
            (np.array([hit[FULL] for hit in row], dtype=np.float32) for row in shortlists),
            k,
        )
        ranked = [
            [
                self._hit(row[position], float(score), contents)
                for score, position in zip(query_scores, query_positions, strict=True)
                if position >= 0
            ]
            for row, query_scores, query_positions in zip(
                shortlists, scores, positions, strict=True
            )
        ]
        timings: Timings = {
            "shortlist": shortlisted - started,
            "rerank": time.perf_counter() - shortlisted,
        }
        return SearchResult(ranked, timings, self._filtering(where))

    def stats(self) -> CollectionStats:
        """Documents (Milvus's row count) and, per vector field, its index type and the bytes of
        its float32 vectors (the index's own size is the server's business)."""
        rows = self._call("get_collection_stats", lambda c: c.get_collection_stats(self.name))
        documents = int(rows["row_count"])
        indexes = {}
        for vector in self._fields():
            index_type, _ = self.params.index(vector.kind, vector.dim)
            indexes[f"{vector.scoring}-{vector.dim}-{vector.kind}"] = IndexStats(
                scoring=vector.scoring,
                dim=vector.dim,
                kind=vector.kind,
                vectors=documents,
                bytes=documents * vector.dim * 4,
                bytes_per_vector=vector.dim * 4,
                details={"milvus_field": vector.name, "milvus_index": index_type},
            )
        return CollectionStats(
            documents=documents,
            dim=self.dim,
            prefix_dims=list(self.prefix_dims),
            fragment_dim=self.fragment_dim,
            change_counter=None,
            indexes=indexes,
            recovery=ServerRecovery(
                backend="milvus", uri=self.connection.uri, collection=self.name
            ),
            full_vectors={"dtype": "float32", "field": FULL, "bytes": documents * self.dim * 4},
            ingest_seconds=dict(self._ingest_seconds),
        )
