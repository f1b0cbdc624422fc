"""What an API key may do: its scope (read, write or admin) over one collection, a list of them,
or all; the scoped keys file; and the check every collection operation makes.

Scopes, each including the ones before it:

- ``read``: search, read and look up documents, embed texts, list the collections it covers;
- ``write``: also add, replace and delete documents (texts or vectors);
- ``admin``: also create and delete collections.

``FRACTAL_API_KEYS`` are ``admin`` over every collection. ``FRACTAL_API_KEYS_FILE`` names a file
of scoped keys, one per line (``#`` starts a comment)::

    KEY SCOPE COLLECTIONS
    3f9c…e1  read   docs,faq      # read the collections docs and faq
    a71d…02  write  default       # write the default collection ("default")
    c0de…99  admin  *             # everything

The service reads the file again when it changes (checked at most once a second,
:class:`KeyFile`), so keys are added, rotated and revoked without a restart; a file that no
longer parses keeps the keys it had, and the log says which line is wrong (never a key).

:mod:`service.security` finds the request's key and binds its :class:`Grant` to the request
(:func:`bound`); the runtime asks :func:`require` before it opens a collection for an operation,
so a key that does not cover the collection gets 403 whether or not the collection exists, and
:func:`covers` filters the collection listing.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from index.catalog import DEFAULT_NAME
from service.errors import ServiceError

logger = logging.getLogger("service")

Scope = Literal["read", "write", "admin"]
SCOPES: tuple[Scope, ...] = get_args(Scope)
"""From the least to the most allowed: each scope allows what the ones before it do."""
ALL = "*"
RELOAD_INTERVAL_S = 1.0
MIN_KEY_CHARS = 16


class Forbidden(ServiceError):
    """The request's API key is valid, but its scope does not cover what was asked."""

    status = 403
    kind = "forbidden"


@dataclass(frozen=True)
class Grant:
    """A key's scope over ``collections`` (None: every collection)."""

    scope: Scope
    collections: frozenset[str] | None = None

    def allows(self, needed: Scope, collection: str | None) -> bool:
        """Whether this grant may do ``needed`` on ``collection`` (None: the default one)."""
        return SCOPES.index(self.scope) >= SCOPES.index(needed) and self.covers(collection)

    def covers(self, collection: str | None) -> bool:
        return self.collections is None or (collection or DEFAULT_NAME) in self.collections


EVERYTHING = Grant("admin")
"""A key of ``FRACTAL_API_KEYS``, and every request of a service without keys."""
_current: ContextVar[Grant] = ContextVar("fractal_grant", default=EVERYTHING)


@contextmanager
def bound(grant: Grant) -> Iterator[None]:
    """Within the block (one request), :func:`require` and :func:`covers` ask ``grant``."""
    token = _current.set(grant)
    try:
        yield
    finally:
        _current.reset(token)


def require(needed: Scope, collection: str | None) -> None:
    """:class:`Forbidden` unless the request's key may do ``needed`` on ``collection``."""
    grant = _current.get()
    if not grant.allows(needed, collection):
        name = collection or DEFAULT_NAME
        raise Forbidden(
            f"this API key's scope ({grant.scope} on {_named(grant)}) does not allow {needed} "
            f"on the collection {name!r}"
        )


def covers(collection: str | None) -> bool:
    """Whether the request's key covers ``collection`` at all (the listing shows only those)."""
    return _current.get().covers(collection)


def _named(grant: Grant) -> str:
    if grant.collections is None:
        return "every collection"
    return ", ".join(sorted(grant.collections))


class KeyFileError(ValueError):
    """A scoped keys file that cannot be used; the message names the line, never a key."""


def parse_key_file(text: str, source: str) -> dict[str, Grant]:
    """Each key of a scoped keys file and its grant (the format is in the module docstring)."""
    keys: dict[str, Grant] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{source}, line {number}"
        parts = line.split()
        if len(parts) != 3:
            raise KeyFileError(
                f"{where}: expected KEY SCOPE COLLECTIONS, found {len(parts)} fields"
            )
        key, scope, collections = parts
        if len(key) < MIN_KEY_CHARS:
            raise KeyFileError(f"{where}: the key has fewer than {MIN_KEY_CHARS} characters")
        if scope not in SCOPES:
            raise KeyFileError(f"{where}: the scope must be one of {', '.join(SCOPES)}")
        names = [name.strip() for name in collections.split(",")]
        if not all(names):
            raise KeyFileError(f"{where}: an empty collection name")
        if key in keys:
            raise KeyFileError(f"{where}: the key repeats an earlier line's")
        keys[key] = Grant(scope, None if ALL in names else frozenset(names))
    return keys


def read_key_file(path: Path) -> dict[str, Grant]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise KeyFileError(f"{path}: cannot be read ({type(error).__name__})") from None
    return parse_key_file(text, str(path))


class KeyFile:
    """A scoped keys file, read again when its modification time or size changes (looked at
    at most every ``interval_s``); a version that does not parse keeps the last good keys."""

    def __init__(self, path: Path, interval_s: float = RELOAD_INTERVAL_S) -> None:
        self.path = path
        self.interval_s = interval_s
        self._keys = read_key_file(path)
        self._stamp = self._stamp_now()
        self._checked = time.monotonic()

    def _stamp_now(self) -> tuple[int, int] | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def keys(self) -> dict[str, Grant]:
        """The keys as the file holds them now (or as it last held them readably)."""
        now = time.monotonic()
        if now - self._checked >= self.interval_s:
            self._checked = now
            stamp = self._stamp_now()
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    self._keys = read_key_file(self.path)
                    logger.info("API keys file reloaded: %d keys", len(self._keys))
                except KeyFileError as error:
                    logger.error("API keys file not reloaded, the last keys stay: %s", error)
        return self._keys
