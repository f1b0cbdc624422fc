"""What a crashed service must still hold: every write its clients saw acknowledged, and the writes
that were in flight when it died, whose outcome is either way.

Each client owns its document ids and its one named collection, so the history of every document
and of every collection is the sequence of one client's acknowledged writes, and the ledger can
say exactly what must be there. A write is recorded as *pending* before it is sent:

- an acknowledged answer (2xx) makes its new state the expected one;
- a refusal (4xx) drops it: the service stored nothing;
- no answer (the process was killed) or a 5xx leaves it pending: after the restart the service
  may hold the old or the new state, and :meth:`Ledger.resolve` accepts either, but a request's
  documents must all be old or all be new (one request is one transaction).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

DEFAULT = "default"


def vector_hash(vector: np.ndarray) -> str:
    """The sha256 of a vector's float32 little-endian bytes (what the store keeps)."""
    return hashlib.sha256(np.asarray(vector, "<f4").tobytes()).hexdigest()


@dataclass(frozen=True)
class Stored:
    """A document as it must be found: its text, its metadata, and the hash of the vector it
    was sent with (None for a document sent as text: its vector is the encoder's)."""

    text: str
    metadata: Mapping
    vector_sha: str | None = None


@dataclass
class PendingWrite:
    """A request whose answer never came: the state it would set for each of its keys."""

    request: str
    states: dict[tuple[str, str], Stored | None]


@dataclass
class Ledger:
    """The expected state of every document ``(collection, id)`` and collection, and the
    writes in flight; safe to use from every client's thread."""

    documents: dict[tuple[str, str], Stored] = field(default_factory=dict)
    collections: dict[str, tuple[str, ...]] = field(default_factory=lambda: {DEFAULT: ()})
    """The collections that exist, with their index kinds (the default one always does)."""
    pending: list[PendingWrite] = field(default_factory=list)
    pending_collections: dict[str, tuple[str, ...] | None] = field(default_factory=dict)
    acknowledged: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    # -- documents ---------------------------------------------------------------------------

    def begin(self, request: str, states: Mapping[tuple[str, str], Stored | None]) -> PendingWrite:
        """Record a document write about to be sent (None: a delete)."""
        write = PendingWrite(request, dict(states))
        with self.lock:
            self.pending.append(write)
        return write

    def acknowledge(self, write: PendingWrite) -> None:
        with self.lock:
            self.pending.remove(write)
            for key, state in write.states.items():
                if state is None:
                    self.documents.pop(key, None)
                else:
                    self.documents[key] = state
            self.acknowledged += 1

    def refuse(self, write: PendingWrite) -> None:
        with self.lock:
            self.pending.remove(write)

    def expected(self, key: tuple[str, str]) -> Stored | None:
        with self.lock:
            return self.documents.get(key)

    def present_in(self, collection: str) -> dict[str, Stored]:
        """The documents that must be in ``collection`` now (ids → state)."""
        with self.lock:
            return {
                doc_id: state
                for (name, doc_id), state in self.documents.items()
                if name == collection
            }

    # -- collections -------------------------------------------------------------------------

    def begin_collection(self, name: str, kinds: tuple[str, ...] | None) -> None:
        """Record a create (``kinds``) or delete (None) of a collection about to be sent."""
        with self.lock:
            self.pending_collections[name] = kinds

    def settle_collection(self, name: str, acknowledged: bool) -> None:
        with self.lock:
            kinds = self.pending_collections.pop(name)
            if acknowledged:
                self._set_collection(name, kinds)
                self.acknowledged += 1

    def _set_collection(self, name: str, kinds: tuple[str, ...] | None) -> None:
        if kinds is None:
            self.collections.pop(name, None)
            self.documents = {key: s for key, s in self.documents.items() if key[0] != name}
        else:
            self.collections[name] = kinds

    # -- after a restart ---------------------------------------------------------------------

    def resolve(
        self, found_collections: Iterable[str], found: Mapping[tuple[str, str], Stored | None]
    ) -> tuple[list[str], int]:
        """Settle every pending write from what the restarted service holds: ``found_collections``
        (its collection names) and ``found[key]`` (each pending key's document as found, None
        when absent). Returns the violations (a pending state that is neither the old nor the new
        one, a request half applied) and how many pending writes had been applied."""
        problems: list[str] = []
        applied = 0
        names = set(found_collections)
        with self.lock:
            for name, kinds in self.pending_collections.items():
                if (name in names) == (kinds is not None):
                    self._set_collection(name, kinds)
                    applied += 1
            self.pending_collections.clear()
            for write in self.pending:
                outcomes = set()
                for key, new in write.states.items():
                    if key[0] not in self.collections:
                        continue  # its collection is gone: nothing of it can be there
                    now = found.get(key)
                    old = self.documents.get(key)
                    if _same(now, new):
                        outcomes.add("new")
                    elif _same(now, old):
                        outcomes.add("old")
                    else:
                        outcomes.add("neither")
                        problems.append(
                            f"{write.request}: {key[0]}/{key[1]} is neither its acknowledged "
                            "state nor the one of the write in flight"
                        )
                if outcomes == {"old", "new"}:
                    problems.append(f"{write.request}: half of the request was applied")
                if outcomes == {"new"}:
                    applied += 1
                    for key, new in write.states.items():
                        if new is None:
                            self.documents.pop(key, None)
                        else:
                            self.documents[key] = new
            self.pending.clear()
        return problems, applied

    def pending_keys(self) -> set[tuple[str, str]]:
        with self.lock:
            return {key for write in self.pending for key in write.states}


def _same(found: Stored | None, expected: Stored | None) -> bool:
    """Whether a found document is the expected one (texts and metadata; vectors are compared
    separately, from the store)."""
    if found is None or expected is None:
        return found is expected
    return found.text == expected.text and dict(found.metadata) == dict(expected.metadata)
