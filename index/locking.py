"""A readers-writer lock: many searches at once, or one index mutation on its own.

Turns alternate fairly. A waiting writer keeps new readers out, so a stream of searches cannot
starve ingestion; and when a writer lets go, the readers that were waiting go in before the next
writer, so a long ingest made of many short write steps cannot starve searches either.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ReadWriteLock:
    """``with lock.read(): ...`` shares the lock; ``with lock.write(): ...`` holds it alone.

    Not re-entrant: a thread must not take it again while holding it.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition(threading.Lock())  # not re-entrant
        self._readers = 0
        self._readers_waiting = 0
        self._readers_turn = False
        self._writing = False
        self._writers_waiting = 0
        self._reading = _Reading(self)

    @property
    def writer_active(self) -> bool:
        """Whether a writer holds the lock or waits for it (a reader now would wait)."""
        return self._writing or self._writers_waiting > 0

    def read(self) -> _Reading:
        """The shared side, for ``with``."""
        return self._reading

    def _enter_read(self) -> None:
        with self._condition:
            self._readers_waiting += 1
            while self._writing or (self._writers_waiting and not self._readers_turn):
                self._condition.wait()
            self._readers_waiting -= 1
            self._readers += 1
            if not self._readers_waiting:
                self._readers_turn = False

    def _leave_read(self) -> None:
        with self._condition:
            self._readers -= 1
            if not self._readers and self._writers_waiting:  # only a writer waits on readers
                self._condition.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._condition:
            self._writers_waiting += 1
            while self._writing or self._readers or self._readers_turn:
                self._condition.wait()
            self._writers_waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._condition:
                self._writing = False
                self._readers_turn = self._readers_waiting > 0
                self._condition.notify_all()


class _Reading:
    """:meth:`ReadWriteLock.read` as a context manager: a class, where a generator-based one
    costs a search about 3 µs more."""

    __slots__ = ("_lock",)

    def __init__(self, lock: ReadWriteLock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        self._lock._enter_read()

    def __exit__(self, *_: object) -> None:
        self._lock._leave_read()
