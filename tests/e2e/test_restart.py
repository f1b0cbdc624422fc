"""Durability: documents ingested over HTTP survive a graceful stop and a ``kill -9`` in the
middle of a large ingest; after a restart on the same index dir every acknowledged document is
there and searches over the acknowledged set return what they returned before."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from benchmarks.harness.processes import ServiceProcess
from tests.servers import GRACEFUL_EXITS
from tests.service.bundles import clinc

SETTINGS = {"index_kinds": "exact,hnsw", "max_texts": "200", "max_k": "1000"}
ROUTES = [
    {"granularity": "fine", "index": "exact"},
    {"granularity": "coarse", "index": "exact"},
    {"granularity": "fine", "index": "hnsw"},
    {"granularity": "coarse", "index": "hnsw"},
    {"rerank": "c2f", "index": "exact"},
]
NUM_KEPT = 150
BATCH = 10
ACKED_BEFORE_KILL = 5
K = 10


def _searches(client: httpx.Client, queries: list[str]) -> list[list[tuple[str, float]]]:
    """Every route's hits for every query, as (id, score) pairs."""
    results = []
    for route in ROUTES:
        response = client.post("/search", json={"queries": queries, "k": K, **route})
        assert response.status_code == 200, response.text
        results += [
            [(hit["id"], hit["score"]) for hit in result["hits"]]
            for result in response.json()["results"]
        ]
    return results


def _assert_same(before: list, after: list) -> None:
    assert len(before) == len(after)
    for old, new in zip(before, after, strict=True):
        assert [doc_id for doc_id, _ in new] == [doc_id for doc_id, _ in old]
        assert [score for _, score in new] == pytest.approx([s for _, s in old], abs=1e-6)


class Ingest(threading.Thread):
    """Posts batches of documents until the server dies; records what was acknowledged."""

    def __init__(self, server: ServiceProcess, texts: list[str]) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.texts = texts
        self.acknowledged: list[str] = []
        self.unanswered: list[str] = []

    def run(self) -> None:
        with self.server.client() as client:
            for start in range(0, len(self.texts), BATCH):
                documents = [
                    {"id": f"burst-{start + i}", "text": text}
                    for i, text in enumerate(self.texts[start : start + BATCH])
                ]
                try:
                    response = client.post("/documents", json={"documents": documents})
                except httpx.TransportError:
                    self.unanswered = [document["id"] for document in documents]
                    return
                assert response.status_code == 200, response.text
                self.acknowledged += response.json()["ids"]


def test_acknowledged_documents_survive_stop_and_kill(
    identity_bundle_dir: Path, tmp_path: Path, launch: Callable[..., ServiceProcess]
) -> None:
    splits = clinc()
    kept_texts = list(splits.train.texts[:NUM_KEPT])
    burst_texts = list(splits.train.texts[NUM_KEPT:])
    queries = list(splits.test.texts[:8])
    index_dir = tmp_path / "index"
    kept = [{"id": f"kept-{i}", "text": text} for i, text in enumerate(kept_texts)]

    first = launch(identity_bundle_dir, index_dir, **SETTINGS)
    with first.client() as client:
        assert client.post("/documents", json={"documents": kept}).status_code == 200
        before = _searches(client, queries)
    assert first.stop() in GRACEFUL_EXITS

    # A graceful stop wrote a snapshot: the next start loads it and has nothing to catch up.
    second = launch(identity_bundle_dir, index_dir, **SETTINGS)
    with second.client() as client:
        recovery = client.get("/info").json()["recovery"]
        assert recovery["rebuilt"] == {} and len(recovery["loaded"]) == 4
        assert recovery["caught_up_changes"] == 0
        _assert_same(before, _searches(client, queries))
    ingest = Ingest(second, burst_texts)
    ingest.start()
    while len(ingest.acknowledged) < ACKED_BEFORE_KILL * BATCH:
        assert ingest.is_alive(), "the ingest ended before the kill"
        ingest.join(0.01)
    second.kill()
    ingest.join()
    assert ingest.unanswered, "the kill did not interrupt the ingest"

    third = launch(identity_bundle_dir, index_dir, **SETTINGS)
    with third.client() as client:
        recovery = client.get("/info").json()["recovery"]
        assert recovery["caught_up_changes"] >= len(ingest.acknowledged)
        for document in kept:
            assert client.get(f"/documents/{document['id']}").json()["text"] == document["text"]
        for doc_id in ingest.acknowledged:
            position = int(doc_id.removeprefix("burst-"))
            assert client.get(f"/documents/{doc_id}").json()["text"] == burst_texts[position]
        # The unanswered batch was one transaction: stored whole or not at all.
        present = {client.get(f"/documents/{doc_id}").status_code for doc_id in ingest.unanswered}
        assert present in ({200}, {404})
        for doc_id in ingest.acknowledged + (ingest.unanswered if present == {200} else []):
            assert client.delete(f"/documents/{doc_id}").status_code == 200
        assert client.get("/info").json()["documents"] == NUM_KEPT
        _assert_same(before, _searches(client, queries))
    assert third.stop() in GRACEFUL_EXITS
