"""The crasher's invariants, checked on a restarted service against the
:class:`~benchmarks.harness.crash_ledger.Ledger` before any client writes again.

1. The writes in flight at the kill are settled: each document is in its acknowledged or its new
   state, and a request is all old or all new (:meth:`Ledger.resolve`).
2. The collections are exactly the acknowledged ones (a create or delete is all or nothing).
3. Through the API, every document a client acknowledged is present with its exact text and
   metadata (``GET``), every acknowledged delete is absent, and no other client id is there
   (``lookup`` of every id a client could have written); the collection's count is the expected
   number (no phantom or duplicate row).
4. In the store file (embedded backend), for every document, the seed documents included: each
   passes its checksum (:func:`index.integrity.check_store`), each expected one is there with its
   exact text and metadata and no other is, no vector is zeroed, a vector sent as a vector has the
   very bytes it was sent with (sha256), and one sent as text is the encoder's vector of its text
   (cosine ≥ :data:`MIN_COSINE` against ``POST /embed``).
5. A filtered exact search (``client == c``, k ≥ every id of the client) returns exactly the
   client's acknowledged documents: the filter's count is what listing it returns.
6. Every index agrees with the store: for ``probes`` documents per collection, a search of the
   document's text at the fine prefix finds it first through the exact index (ties with an equal
   score allowed) and among the first :data:`REACH_K` through every approximate kind built.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

from benchmarks.harness.crash_clients import Workload, documents_path
from benchmarks.harness.crash_ledger import DEFAULT, Ledger, Stored, vector_hash
from index.integrity import check_store, collection_folders

MIN_COSINE = 0.999
REACH_K = 20
SCORE_TIE = 1e-5


@dataclass
class CheckResult:
    """What one check found."""

    violations: list[str] = field(default_factory=list)
    applied: int = 0
    """Writes in flight at the kill that turned out to be stored."""
    unresolved: int = 0
    """Writes in flight at the kill (applied or not)."""
    documents: int = 0
    checks: int = 0
    """Individual comparisons made (documents, vectors, searches)."""


class ServiceFailed(Exception):
    """The service answered a check's request with an error: a violation in itself."""


def _json(response: httpx.Response) -> dict:
    if response.is_error:
        raise ServiceFailed(
            f"{response.request.method} {response.request.url.path} answered "
            f"{response.status_code}: {response.text[:300]}"
        )
    return response.json()


def _get(http: httpx.Client, collection: str, doc_id: str) -> Stored | None:
    response = http.get(f"{documents_path(collection)}/{doc_id}")
    if response.status_code == 404:
        return None
    body = _json(response)
    return Stored(body["text"], body.get("metadata") or {})


def _collections(http: httpx.Client) -> dict[str, int]:
    return {
        DEFAULT if entry["default"] else entry["name"]: int(entry["documents"])
        for entry in _json(http.get("/collections"))["collections"]
    }


class Checker:
    """Checks a restarted service (see the module docstring)."""

    def __init__(
        self,
        workload: Workload,
        ledger: Ledger,
        clients: int,
        index_dir: Path | None,
        probes: int,
        rng: np.random.Generator,
    ) -> None:
        self.workload, self.ledger, self.clients = workload, ledger, clients
        self.index_dir, self.probes, self.rng = index_dir, probes, rng
        self.all_ids = [f"c{c}-{n}" for c in range(clients) for n in range(workload.ids_per_client)]
        self.client_ids = set(self.all_ids)

    def check(self) -> CheckResult:
        result = CheckResult()
        with httpx.Client(base_url=self.workload.base_url, timeout=60.0) as http:
            self._resolve(http, result)
            counts = _collections(http)
            expected = {DEFAULT, *self.ledger.collections}
            for name in sorted(set(counts) ^ expected):
                state = "there but not acknowledged" if name in counts else "missing"
                result.violations.append(f"collection {name} is {state}")
            for name in sorted(set(counts) & expected):
                for step in (self._check_documents, self._check_filters, self._check_indexes):
                    try:
                        step(http, name, counts[name], result)
                    except ServiceFailed as failure:
                        result.violations.append(f"{name}: {failure}")
            if self.index_dir is not None:
                self._check_store_files(http, result)
        return result

    def _resolve(self, http: httpx.Client, result: CheckResult) -> None:
        keys = self.ledger.pending_keys()
        result.unresolved = len(self.ledger.pending) + len(self.ledger.pending_collections)
        names = set(_collections(http))
        found: dict[tuple[str, str], Stored | None] = {}
        for key in keys:
            try:
                found[key] = _get(http, *key) if key[0] in names else None
            except ServiceFailed as failure:
                result.violations.append(str(failure))
                found[key] = Stored("(unreadable)", {})
        problems, result.applied = self.ledger.resolve(names, found)
        result.violations += problems

    def _check_documents(
        self, http: httpx.Client, name: str, count: int, result: CheckResult
    ) -> None:
        everything = self.ledger.present_in(name)
        result.documents += len(everything)
        expected = {doc_id: s for doc_id, s in everything.items() if doc_id in self.client_ids}
        lookup = http.post(f"{documents_path(name)}/lookup", json={"ids": self.all_ids})
        found = set(_json(lookup)["found"])
        for doc_id in sorted(found - set(expected)):
            result.violations.append(f"{name}/{doc_id} is there but was deleted or never acked")
        for doc_id in sorted(set(expected) - found):
            result.violations.append(f"{name}/{doc_id} was acknowledged but is missing")
        for doc_id in sorted(set(expected) & found):
            try:
                stored = _get(http, name, doc_id)
            except ServiceFailed as failure:
                result.violations.append(str(failure))
                continue
            want = expected[doc_id]
            result.checks += 1
            if stored is None or (stored.text, dict(stored.metadata)) != (
                want.text,
                dict(want.metadata),
            ):
                result.violations.append(f"{name}/{doc_id}: text or metadata differ from acked")
        if count != len(everything):
            result.violations.append(
                f"collection {name} counts {count} documents, {len(everything)} acknowledged"
            )

    def _check_filters(
        self, http: httpx.Client, name: str, count: int, result: CheckResult
    ) -> None:
        expected = self.ledger.present_in(name)
        for client in range(self.clients):
            want = {doc_id for doc_id, s in expected.items() if s.metadata.get("client") == client}
            body = {
                "queries": ["note"],
                "k": self.workload.ids_per_client,
                "index": "exact",
                "collection": name,
                "filter": {"key": "client", "eq": client},
            }
            hits = _json(http.post("/search", json=body))["results"][0]["hits"]
            got = {hit["id"] for hit in hits}
            result.checks += 1
            if got != want:
                result.violations.append(
                    f"{name}: the filter client == {client} lists {len(got)} documents, "
                    f"{len(want)} acknowledged ({len(got - want)} extra, {len(want - got)} missing)"
                )

    def _check_indexes(
        self, http: httpx.Client, name: str, count: int, result: CheckResult
    ) -> None:
        expected = self.ledger.present_in(name)
        ids = [doc_id for doc_id in expected if doc_id in self.client_ids]
        if not ids:
            return
        chosen = self.rng.choice(len(ids), size=min(self.probes, len(ids)), replace=False)
        probes = [ids[int(i)] for i in chosen]
        queries = [expected[doc_id].text for doc_id in probes]
        for kind in self.workload.kinds:
            body = {
                "queries": queries,
                "k": REACH_K,
                "index": kind,
                "granularity": "fine",
                "collection": name,
            }
            answers = _json(http.post("/search", json=body))["results"]
            for doc_id, answer in zip(probes, answers, strict=True):
                hits = answer["hits"]
                result.checks += 1
                scores = {hit["id"]: hit["score"] for hit in hits}
                if doc_id not in scores:
                    result.violations.append(f"{name}/{doc_id}: not found by its text ({kind})")
                elif kind == "exact" and scores[doc_id] < hits[0]["score"] - SCORE_TIE:
                    result.violations.append(f"{name}/{doc_id}: not first by its text (exact)")

    def _check_store_files(self, http: httpx.Client, result: CheckResult) -> None:
        assert self.index_dir is not None
        for name, folder in collection_folders(self.index_dir):
            if name not in self.ledger.collections and name != DEFAULT:
                continue
            checked = check_store(name, folder)
            result.violations += [f"{name}: {problem}" for problem in checked.page_problems]
            result.violations += [f"{name}: {problem}" for problem in checked.row_problems]
            self._check_rows(http, name, checked.path, result)

    def _check_rows(self, http: httpx.Client, name: str, store: Path, result: CheckResult) -> None:
        expected = self.ledger.present_in(name)
        uri = f"{store.resolve().as_uri()}?mode=ro"
        with closing(sqlite3.connect(uri, uri=True)) as db:
            rows = db.execute("SELECT doc_id, text, metadata, vector FROM documents").fetchall()
        if len(rows) != len({row[0] for row in rows}):
            result.violations.append(f"{name}: a document id is stored twice")
        stored = {row[0]: row[1:] for row in rows}
        for doc_id in sorted(set(stored) ^ set(expected)):
            where = "stored, not acknowledged" if doc_id in stored else "acknowledged, not stored"
            result.violations.append(f"{name}/{doc_id}: {where} (store file)")
        vectors = {doc_id: np.frombuffer(row[2], "<f4") for doc_id, row in stored.items()}
        encoded = [doc_id for doc_id in expected if expected[doc_id].vector_sha is None]
        for doc_id, state in expected.items():
            if doc_id not in stored:
                continue
            text, metadata, _ = stored[doc_id]
            vector = vectors[doc_id]
            result.checks += 1
            if (text, json.loads(metadata)) != (state.text, dict(state.metadata)):
                result.violations.append(f"{name}/{doc_id}: text or metadata differ (store file)")
            if not np.any(vector):
                result.violations.append(f"{name}/{doc_id}: its stored vector is all zeros")
            elif state.vector_sha is not None and vector_hash(vector) != state.vector_sha:
                result.violations.append(f"{name}/{doc_id}: its vector is not the one sent")
        for start in range(0, len(encoded), 32):
            chunk = [doc_id for doc_id in encoded[start : start + 32] if doc_id in vectors]
            if not chunk:
                continue
            texts = [expected[doc_id].text for doc_id in chunk]
            answer = _json(http.post("/embed", json={"texts": texts, "dims": self.workload.dim}))
            for doc_id, item in zip(chunk, answer["data"], strict=True):
                want = np.asarray(item["embeddings"][0]["vector"], np.float32)
                have = vectors[doc_id]
                cosine = float(want @ have / (np.linalg.norm(want) * np.linalg.norm(have) or 1))
                if cosine < MIN_COSINE:
                    result.violations.append(
                        f"{name}/{doc_id}: its vector is not its text's (cosine {cosine:.4f})"
                    )
