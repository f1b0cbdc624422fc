"""The crasher's clients: threads that write to a live service at random and record every write in
a :class:`~benchmarks.harness.crash_ledger.Ledger` before it is sent and when it is answered.

Client ``c`` owns the document ids ``c{c}-{n}`` (``n`` < ``ids_per_client``) in the default
collection and in its own named collection ``crash-{c}``, which only it creates and deletes. Its
operations, drawn with :data:`WEIGHTS`:

- ``upsert``: 1…``max_batch`` documents sent as text (new ones and replacements), one request;
- ``vectors``: the same through ``POST /documents/vectors``, with vectors made by ``POST /embed``
  (a bulk import of precomputed vectors), their hashes recorded;
- ``delete``: one document (``DELETE /documents/{id}``);
- ``collection``: its named collection created (with the run's index kinds) or deleted;
- ``search``: a filtered search (``client == c``) in one of its collections.

A client stops at the first request that gets no answer (the service was killed) or a 5xx; the
write it was sending stays pending in the ledger.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

import httpx
import numpy as np

from benchmarks.harness.crash_ledger import DEFAULT, Ledger, PendingWrite, Stored, vector_hash

WEIGHTS = {"upsert": 0.35, "vectors": 0.2, "delete": 0.15, "collection": 0.05, "search": 0.25}
COLORS = ("red", "green", "blue", "amber")
WORDS = ("harbour", "lantern", "orchard", "granite", "meadow", "copper", "willow", "falcon")


@dataclass(frozen=True)
class Workload:
    """What every client shares: the service, the bundle's full dim and hash, the index kinds
    named collections get, and the sizes."""

    base_url: str
    dim: int
    bundle_hash: str
    kinds: tuple[str, ...]
    ids_per_client: int
    max_batch: int


def collection_name(client: int) -> str:
    return f"crash-{client}"


def documents_path(collection: str) -> str:
    return "/documents" if collection == DEFAULT else f"/collections/{collection}/documents"


class CrashClient(threading.Thread):
    """One client (see the module docstring); ``answers`` counts its answers by status."""

    def __init__(
        self, number: int, workload: Workload, ledger: Ledger, seed: int, stop: threading.Event
    ) -> None:
        super().__init__(daemon=True, name=f"crash-client-{number}")
        self.number, self.workload, self.ledger, self.stop = number, workload, ledger, stop
        self.rng = np.random.default_rng(seed)
        self.answers: Counter[str] = Counter()
        self.operations: Counter[str] = Counter()
        self.cut = False
        """Whether it stopped at a request without an answer or with a 5xx."""

    def run(self) -> None:
        names, weights = list(WEIGHTS), np.array(list(WEIGHTS.values()))
        with httpx.Client(base_url=self.workload.base_url, timeout=30.0) as http:
            self.http = http
            while not self.stop.is_set() and not self.cut:
                operation = str(self.rng.choice(names, p=weights / weights.sum()))
                try:
                    getattr(self, f"_op_{operation}")()
                except httpx.TransportError:
                    self.answers["no answer"] += 1
                    self.cut = True
                    return
                self.operations[operation] += 1

    # -- one operation each ------------------------------------------------------------------

    def _op_collection(self) -> None:
        name = collection_name(self.number)
        exists = name in self.ledger.collections
        kinds = None if exists else self.workload.kinds
        self.ledger.begin_collection(name, kinds)
        if exists:
            response = self.http.request("DELETE", f"/collections/{name}", json={"name": name})
        else:
            body = {"name": name, "index_kinds": list(self.workload.kinds)}
            response = self.http.post("/collections", json=body)
        if self._answered(response):
            self.ledger.settle_collection(name, response.is_success)

    def _op_upsert(self) -> None:
        collection, states = self._new_states()
        documents = [
            {"id": key[1], "text": state.text, "metadata": dict(state.metadata)}
            for key, state in states.items()
        ]
        write = self.ledger.begin(f"upsert of {len(documents)}", states)
        self._send(write, "POST", documents_path(collection), {"documents": documents})

    def _op_vectors(self) -> None:
        collection, states = self._new_states()
        texts = [state.text for state in states.values()]
        embedded = self.http.post("/embed", json={"texts": texts, "dims": self.workload.dim})
        if not self._answered(embedded) or not embedded.is_success:
            return
        vectors = [
            np.asarray(item["embeddings"][0]["vector"], np.float32)
            for item in embedded.json()["data"]
        ]
        states = {
            key: Stored(state.text, state.metadata, vector_hash(vector))
            for (key, state), vector in zip(states.items(), vectors, strict=True)
        }
        documents = [
            {
                "id": key[1],
                "text": state.text,
                "metadata": dict(state.metadata),
                "vector": v.tolist(),
            }
            for (key, state), v in zip(states.items(), vectors, strict=True)
        ]
        write = self.ledger.begin(f"vector import of {len(documents)}", states)
        body = {"bundle_hash": self.workload.bundle_hash, "documents": documents}
        self._send(write, "POST", f"{documents_path(collection)}/vectors", body)

    def _op_delete(self) -> None:
        collection = self._pick_collection()
        doc_id = self._doc_id(int(self.rng.integers(self.workload.ids_per_client)))
        write = self.ledger.begin("delete", {(collection, doc_id): None})
        self._send(write, "DELETE", f"{documents_path(collection)}/{doc_id}", None)

    def _op_search(self) -> None:
        collection = self._pick_collection()
        body = {
            "queries": [str(self.rng.choice(WORDS))],
            "k": 10,
            "collection": collection,
            "filter": {"key": "client", "eq": self.number},
        }
        self._answered(self.http.post("/search", json=body))

    # -- helpers -----------------------------------------------------------------------------

    def _doc_id(self, n: int) -> str:
        return f"c{self.number}-{n}"

    def _pick_collection(self) -> str:
        own = collection_name(self.number)
        return own if own in self.ledger.collections and self.rng.random() < 0.5 else DEFAULT

    def _new_states(self) -> tuple[str, dict[tuple[str, str], Stored]]:
        """A collection and 1…max_batch of this client's documents in new versions."""
        collection = self._pick_collection()
        count = int(self.rng.integers(1, self.workload.max_batch + 1))
        numbers = self.rng.choice(self.workload.ids_per_client, size=count, replace=False)
        states = {}
        for n in sorted(int(n) for n in numbers):
            version = int(self.rng.integers(1 << 30))
            words = " ".join(self.rng.choice(WORDS, size=3))
            text = f"{words} note {n} of client {self.number}, version {version}"
            metadata = {
                "client": self.number,
                "n": n,
                "version": version,
                "color": str(self.rng.choice(COLORS)),
            }
            states[(collection, self._doc_id(n))] = Stored(text, metadata)
        return collection, states

    def _answered(self, response: httpx.Response) -> bool:
        """Count the answer; False (and the client stops) on a 5xx."""
        self.answers[str(response.status_code)] += 1
        if response.status_code >= 500:
            self.cut = True
            return False
        return True

    def _send(self, write: PendingWrite, method: str, path: str, body: dict | None) -> None:
        response = self.http.request(method, path, json=body)
        if not self._answered(response):
            return  # a 5xx: the outcome is unknown, the write stays pending
        if response.is_success:
            self.ledger.acknowledge(write)
        else:
            self.ledger.refuse(write)
