"""Replicas on one Milvus: two ``python -m service`` processes, each with its own (empty) index
dir, share a ``milvus-lite`` server of this module's own (the session's is left alone: the last
test kills this one).

- Started at the same moment on a fresh prefix, both come up (one creates the default
  collection while the other waits for its record), as ``--scale fractal=N`` starts them.
- What one replica writes, deletes, creates or drops, the other sees at once.
- ``kill -9`` of a replica in the middle of an ingest loses no write it acknowledged: the other
  replica finds every one.
- ``kill -9`` of Milvus under load: no answer is a 500, every failure is a 503 in the one error
  shape, ``/ready`` says 503 while Milvus is gone, and both replicas recover by themselves
  once it is back on its port with its data; every acknowledged write is there.

The measured numbers are printed (``pytest -s`` shows them).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from benchmarks.harness.metrics import metric_samples, metric_total
from benchmarks.harness.processes import MilvusServer, ServiceProcess
from tests.servers import GRACEFUL_EXITS, start_milvus, start_server

Replicas = Callable[[str], tuple[ServiceProcess, ServiceProcess]]

BATCH = 5
MAX_BATCHES = 400
ACKED_BEFORE_KILL = 40
"""Batches replica A acknowledges before it is killed (of at most ``MAX_BATCHES``)."""
LOOKUP_CHUNK = 1000
"""``POST /documents/lookup`` takes at most 1,000 ids."""
LOAD_BEFORE_S = 2.0
OUTAGE_S = 3.0
RECOVERY_LIMIT_S = 10.0
"""The issue's bound from Milvus's restart to a replica's first 200 (measured: 1 to 3 s)."""
LOAD_AFTER_S = 1.0
LOAD_LIMIT_S = 20.0
PAUSE_S = 0.02
"""Between two requests of one load thread: the load leaves the shared cores some room."""
OUTAGE_TYPES = {"backend_unavailable", "not_ready"}
ERROR_FIELDS = {"type", "message", "param"}


def text_of(doc_id: str) -> str:
    return f"replicated note {doc_id}: the balance of account {doc_id[::-1]}"


@pytest.fixture(scope="module")
def milvus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MilvusServer]:
    """A fresh ``milvus-lite`` server for this module; stopped at the end."""
    server = start_milvus(tmp_path_factory.mktemp("milvus-replicas"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def replicas(tiny_bundle_dir: Path, tmp_path: Path, milvus: MilvusServer) -> Iterator[Replicas]:
    """``replicas(prefix)``: replicas A and B, started together, serving the Milvus collections
    under ``prefix``, each with its own empty index dir and log; killed at the end if running."""
    started: list[ServiceProcess] = []

    def start(name: str, prefix: str) -> ServiceProcess:
        server = start_server(
            tiny_bundle_dir,
            tmp_path / f"index-{name}",
            tmp_path / f"{name}.log",
            index_backend="milvus",
            milvus_uri=milvus.uri,
            milvus_prefix=prefix,
        )
        started.append(server)
        return server

    def pair(prefix: str) -> tuple[ServiceProcess, ServiceProcess]:
        with ThreadPoolExecutor(2) as pool:
            a, b = pool.map(start, ("a", "b"), (prefix, prefix))
        return a, b

    yield pair
    for server in started:
        if server.process.poll() is None:
            server.kill()


def found(client: httpx.Client, doc_ids: list[str]) -> set[str]:
    """Which of ``doc_ids`` the replica finds (``POST /documents/lookup``, in chunks)."""
    present: set[str] = set()
    for start in range(0, len(doc_ids), LOOKUP_CHUNK):
        response = client.post(
            "/documents/lookup", json={"ids": doc_ids[start : start + LOOKUP_CHUNK]}
        )
        assert response.status_code == 200, response.text
        present.update(response.json()["found"])
    return present


def top_hit(client: httpx.Client, text: str, collection: str | None = None) -> str | None:
    params = {"q": text, "k": 3} | ({"collection": collection} if collection else {})
    response = client.get("/search", params=params)
    assert response.status_code == 200, response.text
    hits = response.json()["hits"]
    return hits[0]["id"] if hits else None


def test_what_one_replica_writes_the_other_serves(replicas: Replicas) -> None:
    a, b = replicas("rep1")
    with a.client() as via_a, b.client() as via_b:
        document = {"id": "shared-1", "text": text_of("shared-1"), "metadata": {"team": "x"}}
        other = {"id": "shared-2", "text": "an unrelated sentence about the weather"}
        assert via_a.post("/documents", json={"documents": [document, other]}).status_code == 200
        assert via_b.get("/documents/shared-1").json() == document
        assert top_hit(via_b, document["text"]) == "shared-1"

        assert via_b.delete("/documents/shared-1").status_code == 200
        assert via_a.get("/documents/shared-1").status_code == 404
        assert top_hit(via_a, document["text"]) == "shared-2"

        created = via_a.post("/collections", json={"name": "team-notes"})
        assert created.status_code == 201, created.text
        listed = via_b.get("/collections").json()["collections"]
        assert {c["name"] for c in listed} == {"default", "team-notes"}
        note = {"id": "note-1", "text": text_of("note-1"), "metadata": {}}
        stored = via_b.post("/collections/team-notes/documents", json={"documents": [note]})
        assert stored.status_code == 200, stored.text
        assert via_a.get("/collections/team-notes/documents/note-1").json() == note
        assert top_hit(via_b, note["text"], "team-notes") == "note-1"
        assert top_hit(via_a, note["text"], "team-notes") == "note-1"

        dropped = via_b.request("DELETE", "/collections/team-notes", json={"name": "team-notes"})
        assert dropped.status_code == 200, dropped.text
        gone = via_a.get("/collections/team-notes/documents/note-1")
        assert gone.status_code == 404 and gone.json()["error"]["type"] == "not_found"
        gone = via_a.get("/search", params={"q": "x", "collection": "team-notes"})
        assert gone.status_code == 404, gone.text
        assert [c["name"] for c in via_a.get("/collections").json()["collections"]] == ["default"]
        assert via_a.post("/collections", json={"name": "team-notes"}).status_code == 201
    for server in (a, b):
        assert server.stop() in GRACEFUL_EXITS


class Ingest(threading.Thread):
    """Posts batches of documents to one replica until it dies (at most ``MAX_BATCHES``);
    records the ids it acknowledged, every other status, and the batch the kill cut off."""

    def __init__(self, server: ServiceProcess) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.acknowledged: list[str] = []
        self.failures: list[int] = []
        self.unanswered: list[str] = []
        self.enough = threading.Event()

    def run(self) -> None:
        with self.server.client() as client:
            for batch in range(MAX_BATCHES):
                ids = [f"ingest-{batch}-{i}" for i in range(BATCH)]
                documents = [{"id": doc_id, "text": text_of(doc_id)} for doc_id in ids]
                try:
                    response = client.post("/documents", json={"documents": documents})
                except httpx.TransportError:  # the kill: not an acknowledgement
                    self.unanswered = ids
                    return
                if response.status_code == 200:
                    self.acknowledged += response.json()["ids"]
                else:
                    self.failures.append(response.status_code)
                if len(self.acknowledged) >= ACKED_BEFORE_KILL * BATCH:
                    self.enough.set()


def test_a_replica_killed_mid_ingest_loses_no_acknowledged_write(replicas: Replicas) -> None:
    a, b = replicas("rep2")
    ingest = Ingest(a)
    ingest.start()
    assert ingest.enough.wait(60), f"A acknowledged {len(ingest.acknowledged)} documents"
    a.kill()
    ingest.join(30)
    assert not ingest.is_alive()
    assert ingest.unanswered, "the kill did not interrupt the ingest"

    with b.client() as via_b:
        visible = found(via_b, ingest.acknowledged)
        lost = sorted(set(ingest.acknowledged) - visible)
        cut_off = found(via_b, ingest.unanswered)
        print(
            f"\nreplica A killed mid-ingest: {len(ingest.acknowledged)} documents acknowledged "
            f"in {len(ingest.acknowledged) // BATCH} batches, {len(lost)} lost, "
            f"{len(ingest.failures)} non-200 answers before the kill; the batch the kill cut "
            f"off: {len(cut_off)} of {BATCH} stored"
        )
        assert ingest.failures == []
        assert lost == []
        assert len(cut_off) in (0, BATCH)  # one upsert: all or nothing
        last = ingest.acknowledged[-1]
        assert via_b.get(f"/documents/{last}").json()["text"] == text_of(last)
        assert top_hit(via_b, text_of(last)) == last


@dataclass(frozen=True)
class Answer:
    """One request of the load on a replica: when it was sent and answered, and the answer."""

    replica: str
    kind: str
    sent: float
    answered: float
    status: int
    """-1: no answer (a transport error)."""
    error: dict | None
    """The ``error`` object of an error answer's JSON body (None if it has none)."""
    retry_after: str | None

    @property
    def error_type(self) -> str | None:
        return None if self.error is None else self.error.get("type")


def _error_of(response: httpx.Response) -> dict | None:
    try:
        error = response.json().get("error")
    except ValueError:
        return None
    return error if isinstance(error, dict) else None


class Load:
    """Writes, searches and ``/ready`` polls on every replica, each in its own thread, until
    stopped; records every answer and the ids of every acknowledged write."""

    def __init__(self, servers: dict[str, ServiceProcess]) -> None:
        self.servers = servers
        self.answers: list[Answer] = []
        self.acknowledged: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(kind,), daemon=True)
            for kind in ("write", "search", "ready")
        ]

    def _request(self, client: httpx.Client, kind: str, number: int) -> httpx.Response:
        if kind == "write":
            doc_id = f"load-{number}"
            documents = [{"id": doc_id, "text": text_of(doc_id)}]
            return client.post("/documents", json={"documents": documents})
        if kind == "search":
            return client.get("/search", params={"q": text_of(f"load-{number}"), "k": 3})
        return client.get("/ready")

    def _answer(self, client: httpx.Client, name: str, kind: str, number: int) -> Answer:
        sent = time.monotonic()
        try:
            response = self._request(client, kind, number)
        except httpx.TransportError:
            return Answer(name, kind, sent, time.monotonic(), -1, None, None)
        answered = time.monotonic()
        if response.status_code == 200:
            if kind == "write":
                with self._lock:
                    self.acknowledged += response.json()["ids"]
            return Answer(name, kind, sent, answered, 200, None, None)
        retry_after = response.headers.get("retry-after")
        return Answer(
            name, kind, sent, answered, response.status_code, _error_of(response), retry_after
        )

    def _run(self, kind: str) -> None:
        clients = {name: server.client(timeout_s=30) for name, server in self.servers.items()}
        number = 0
        while not self._stop.is_set():
            for name, client in clients.items():
                number += 1
                answer = self._answer(client, name, kind, number)
                with self._lock:
                    self.answers.append(answer)
            time.sleep(PAUSE_S)
        for client in clients.values():
            client.close()

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def first_ok(self, replica: str, kind: str, since: float) -> float | None:
        """When the first 200 of a ``kind`` request sent to ``replica`` after ``since`` came."""
        with self._lock:
            times = [
                answer.answered
                for answer in self.answers
                if (answer.replica, answer.kind, answer.status) == (replica, kind, 200)
                and answer.sent >= since
            ]
        return min(times, default=None)


def test_milvus_killed_under_load_is_503_then_recovers_by_itself(
    replicas: Replicas, milvus: MilvusServer
) -> None:
    a, b = replicas("rep3")
    servers = {"A": a, "B": b}
    load = Load(servers)
    started = time.monotonic()
    load.start()
    try:
        time.sleep(LOAD_BEFORE_S)
        acknowledged_before = len(load.acknowledged)
        milvus.kill()
        killed = time.monotonic()
        time.sleep(OUTAGE_S)
        restarted = time.monotonic()
        milvus.start()
        listening = time.monotonic() - restarted
        deadline = min(restarted + RECOVERY_LIMIT_S, started + LOAD_LIMIT_S)
        while time.monotonic() < deadline and not all(
            load.first_ok(name, kind, restarted) for name in servers for kind in ("ready", "search")
        ):
            time.sleep(0.1)
        time.sleep(LOAD_AFTER_S)
    finally:
        load.stop()

    recovery = {
        (name, kind): (None if at is None else at - restarted)
        for name in servers
        for kind in ("ready", "search", "write")
        for at in [load.first_ok(name, kind, restarted)]
    }
    answers = load.answers
    failed = [answer for answer in answers if answer.status != 200]
    outage = [answer for answer in answers if killed <= answer.sent < restarted]
    relapses = [
        answer
        for answer in failed
        if (at := recovery.get((answer.replica, answer.kind))) is not None
        and answer.sent > restarted + at
    ]
    with a.client() as via_a, b.client() as via_b:
        backend_errors = {
            name: metric_total(metric_samples(client), "fractal_backend_errors_total")
            for name, client in (("A", via_a), ("B", via_b))
        }
        lost = {
            name: sorted(set(load.acknowledged) - found(client, load.acknowledged))
            for name, client in (("A", via_a), ("B", via_b))
        }
    statuses: dict[int, int] = {}
    for answer in answers:
        statuses[answer.status] = statuses.get(answer.status, 0) + 1
    print(
        f"\nMilvus killed under load for {OUTAGE_S:g} s, two replicas: {len(answers)} answers "
        f"{dict(sorted(statuses.items()))}, {len(outage)} sent during the outage; "
        f"{len(load.acknowledged)} writes acknowledged ({acknowledged_before} before the kill), "
        f"lost on A {len(lost['A'])}, on B {len(lost['B'])}; milvus-lite listening again "
        f"{listening:.2f} s after its restart; first 200 after the restart (s): "
        + ", ".join(
            f"{name} {kind} {'never' if at is None else f'{at:.2f}'}"
            for (name, kind), at in recovery.items()
        )
        + f"; {len(relapses)} failures after recovery"
        + f"; fractal_backend_errors_total A {backend_errors['A']:g}, B {backend_errors['B']:g}"
    )

    assert [answer for answer in failed if answer.status != 503] == []  # no 500, none dropped
    for answer in failed:
        assert answer.error is not None and set(answer.error) == ERROR_FIELDS, answer
        assert answer.error_type in OUTAGE_TYPES, answer
        if answer.error_type == "backend_unavailable":
            assert answer.retry_after, answer
        if answer.kind == "ready":
            assert answer.error_type == "not_ready", answer
    for name in servers:
        ready_during = {a.status for a in outage if (a.replica, a.kind) == (name, "ready")}
        assert 503 in ready_during, f"/ready of {name} never said 503 during the outage"
        for kind in ("ready", "search", "write"):
            at = recovery[(name, kind)]
            assert at is not None and at <= RECOVERY_LIMIT_S, (name, kind, at)
    assert relapses == []
    assert acknowledged_before > 0
    assert len(load.acknowledged) > acknowledged_before
    assert lost == {"A": [], "B": []}
    assert all(count > 0 for count in backend_errors.values()), backend_errors
