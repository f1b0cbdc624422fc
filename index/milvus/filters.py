"""Metadata filters for the Milvus backend: what a document stores to be filtered on, and the
Milvus boolean expression of a parsed filter, meaning exactly what :mod:`index.filters` means in
the embedded store (same keys, same list, type and missing-key rules).

**What a document stores.** Besides its metadata as given, each Milvus row holds one JSON value,
:func:`filterable`, built from :func:`index.filters.indexed_values` (so NaN, over-long strings,
objects, nulls and lists in lists are "present, no value" there as here)::

    {"k<24 hex>": {"s": [...], "n": [...], "b": [...]}, ...}

- One member per metadata key (dotted path), named ``k`` + the first 24 hex digits of the
  SHA-256 of the key's UTF-8 (96 bits: two keys of one collection sharing a name is a chance
  of about n² / 2⁹⁷): user keys never enter an expression. A key present with no comparable
  value is ``{}``. Keys longer than any filter may name (:data:`index.filters.MAX_KEY_CHARS`)
  are left out.
- The key's values split by type, so that types never meet: strings in ``s``, numbers in ``n``,
  booleans in ``b`` (``"t"`` / ``"f"``). Every stored value and every literal of an expression is
  a **token**: a text of the characters ``-0-9A-Z_a-z`` (nothing to escape, and Milvus's string
  literals take no ``\\u``) whose plain string order is the value's order:

  - a string: its UTF-8 bytes in base 64 with the alphabet re-ordered by ASCII and no padding.
    Bytes compare as UTF-8 compares, i.e. by code point, which is how SQLite compares text.
  - a number: 11 bytes, a sign class (-inf, negative, zero, positive, +inf), a biased binary
    exponent and a 63-bit mantissa (inverted when negative), in the same base 64: exact for every
    64-bit integer and every double, so ``1 == 1.0``, ``-0.0 == 0`` and ``2**53 + 1 > 2.0**53``,
    as in SQLite, and infinities (which JSON cannot hold) keep their place.

- Each list is deduplicated and sorted, its greatest token moved first: ``[max, min, the rest]``.

**The expression.** Every leaf is two-valued, ``(exists PATH and TEST)``, because Milvus's
three-valued logic makes a comparison with a missing member unknown, and ``not unknown`` matches
nothing, while the embedded store's ``not`` matches documents without the key. Then:

- ``eq`` / ``in``: ``json_contains_any`` on the list of each type given (exact token equality).
- a range with one bound: the greatest value (position 0) for a lower bound, the least (position
  1, or 0 for a single value) for an upper one; exact for any number of values.
- a range with both bounds must hold for one value: an ``or`` over positions ``0 …
  MAX_RANGE_VALUES - 1``. So a document with more than :data:`MAX_RANGE_VALUES` distinct strings,
  or numbers, under one key is refused at write time (:class:`UnfilterableMetadata`), as is one
  whose filterable value exceeds Milvus's JSON field limit, :data:`MAX_FILTERABLE_BYTES`.
- ``exists``, ``and``, ``or``, ``not``: ``exists P`` / ``not exists P`` and the same operators.

**Size.** A filter has at most 64 conditions and 4,096 ``in`` values (1,024 per ``in``), so an
expression holds at most 4 × 1,024 ``in`` tokens plus 60 two-sided ranges × 16 positions × 2
bounds = 6,016 literals; a string token is at most 5,462 characters (1,024 characters of four
UTF-8 bytes), so the worst case, with a field name of up to 255 characters, is about 34 MB
(:data:`MAX_EXPRESSION_CHARS`), against about 17 MB of parameters for the same filter in SQLite.
A typical condition takes a few hundred bytes; a range with both bounds about 3 KB.

Pure Python, no pymilvus: the Milvus backend stores :func:`filterable` and queries with
:func:`expression`.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
import re

from index.filters import (
    MAX_KEY_CHARS,
    NO_VALUE,
    TRUE_VALUE,
    And,
    Equals,
    Exists,
    Filter,
    Not,
    Or,
    Range,
    indexed_values,
)

MAX_RANGE_VALUES = 16
"""Distinct strings, and distinct numbers, one key may hold: a range with both bounds is tested
value by value, one position at a time (expression size grows with this)."""
MAX_FILTERABLE_BYTES = 65_536
"""Milvus's limit on one JSON value, in bytes (the filterable value is ASCII)."""
MAX_EXPRESSION_CHARS = 34_000_000
"""The longest expression of a filter within the grammar's limits (see the module docstring)."""

_BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_SORTED_BASE64 = "-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"
"""Base 64 digits in ASCII order: text in this alphabet compares as the bytes it encodes."""
_TO_SORTED = str.maketrans(_BASE64, _SORTED_BASE64)

_NEGATIVE_INFINITY, _NEGATIVE, _ZERO, _POSITIVE, _POSITIVE_INFINITY = range(5)
_EXPONENT_BIAS = 1075
"""Added to a binary exponent (-1074 for the least double … 1023) to make it non-negative."""
_MANTISSA_BITS = 63
"""Bits after the leading one: 63 hold any 64-bit integer, 52 any double."""
TRUE_TOKEN, FALSE_TOKEN = "t", "f"
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class UnfilterableMetadata(ValueError):
    """Metadata the Milvus backend cannot store so that every filter keeps its meaning; ``key``
    is the metadata key at fault (None when the whole value is too large), ``limit`` the limit."""

    def __init__(self, message: str, key: str | None, limit: int) -> None:
        super().__init__(message)
        self.key = key
        self.limit = limit


# -- tokens -------------------------------------------------------------------------------------


def _sortable_text(data: bytes) -> str:
    """``data`` as text whose string order is the bytes' order (zero bits pad the last digit;
    a longer input always gives a longer text, so no two inputs share one)."""
    return base64.b64encode(data).decode("ascii").rstrip("=").translate(_TO_SORTED)


def string_token(value: str) -> str:
    """The token of a string: ordered by code point, as SQLite orders UTF-8 text."""
    return _sortable_text(value.encode("utf-8", "surrogatepass"))


def number_token(value: int | float) -> str:
    """The token of a number (a 64-bit integer, or any double): ordered by exact value."""
    if value == 0 or math.isinf(value):
        sign = _ZERO if value == 0 else _POSITIVE_INFINITY if value > 0 else _NEGATIVE_INFINITY
        return _sortable_text(bytes([sign]) + bytes(10))
    numerator, denominator = value.as_integer_ratio()  # the denominator is a power of two
    magnitude = abs(numerator)
    trailing_zeros = (magnitude & -magnitude).bit_length() - 1
    magnitude >>= trailing_zeros  # value = ±magnitude × 2 ** scale
    scale = trailing_zeros - (denominator.bit_length() - 1)
    top = magnitude.bit_length() - 1
    if top > _MANTISSA_BITS:
        raise ValueError(f"{value!r} is not a 64-bit integer or a double")
    exponent = top + scale + _EXPONENT_BIAS
    mantissa = (magnitude - (1 << top)) << (_MANTISSA_BITS - top)
    if numerator < 0:  # a greater magnitude is a lesser number
        exponent, mantissa = 0xFFFF - exponent, (1 << 64) - 1 - mantissa
    sign = _NEGATIVE if numerator < 0 else _POSITIVE
    return _sortable_text(bytes([sign]) + exponent.to_bytes(2, "big") + mantissa.to_bytes(8, "big"))


@functools.lru_cache(maxsize=65_536)
def key_name(key: str) -> str:
    """The member of the filterable value that holds metadata key ``key``."""
    return "k" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:24]


# -- what a document stores ---------------------------------------------------------------------


def _greatest_first(tokens: set[str]) -> list[str]:
    ordered = sorted(tokens)
    return ordered if len(ordered) < 2 else [ordered[-1], *ordered[:-1]]


def filterable(metadata: dict) -> dict:
    """The JSON value a document stores to be filtered on (see the module docstring), or
    :class:`UnfilterableMetadata`."""
    members: dict[str, dict[str, set[str]]] = {}
    for key, value in indexed_values(metadata):
        if len(key) > MAX_KEY_CHARS:
            continue  # no filter can name it
        values = members.setdefault(key, {"s": set(), "n": set(), "b": set()})
        if isinstance(value, str):
            values["s"].add(string_token(value))
        elif isinstance(value, int | float):
            values["n"].add(number_token(value))
        elif value != NO_VALUE:
            values["b"].add(TRUE_TOKEN if value == TRUE_VALUE else FALSE_TOKEN)
    stored = {}
    for key, values in members.items():
        for kind, name in (("s", "strings"), ("n", "numbers")):
            if len(values[kind]) > MAX_RANGE_VALUES:
                shown = key if len(key) <= 60 else key[:57] + "..."
                raise UnfilterableMetadata(
                    f"metadata key {shown!r} holds {len(values[kind])} distinct {name}; the "
                    f"Milvus backend filters on at most {MAX_RANGE_VALUES} {name} per key",
                    key,
                    MAX_RANGE_VALUES,
                )
        stored[key_name(key)] = {
            kind: _greatest_first(tokens) for kind, tokens in values.items() if tokens
        }
    size = len(json.dumps(stored, separators=(",", ":")))
    if size > MAX_FILTERABLE_BYTES:
        raise UnfilterableMetadata(
            f"metadata takes {size:,} bytes in its filterable form; Milvus stores at most "
            f"{MAX_FILTERABLE_BYTES:,} bytes in one JSON value",
            None,
            MAX_FILTERABLE_BYTES,
        )
    return stored


# -- the expression -----------------------------------------------------------------------------


def expression(node: Filter, field: str = "filterable") -> str:
    """The Milvus boolean expression matching the rows whose ``field`` (a :func:`filterable`
    value) matches ``node``: the same documents the embedded store finds."""
    if not _FIELD_NAME.fullmatch(field):
        raise ValueError(f"{field!r} is not a Milvus field name")
    return _expression(node, field)


def _contains_any(values: str, tokens: list[str]) -> str:
    quoted = ", ".join(f'"{token}"' for token in tokens)
    return f"(exists {values} and json_contains_any({values}, [{quoted}]))"


def _expression(node: Filter, field: str) -> str:
    if isinstance(node, Not):
        return f"(not {_expression(node.child, field)})"
    if isinstance(node, And | Or):
        operator = " and " if isinstance(node, And) else " or "
        return f"({operator.join(_expression(child, field) for child in node.children)})"
    path = f'{field}["{key_name(node.key)}"]'
    if isinstance(node, Exists):
        return f"(exists {path})" if node.present else f"(not exists {path})"
    if isinstance(node, Equals):
        wanted = (
            ("s", [string_token(value) for value in node.strings]),
            ("n", list(dict.fromkeys(number_token(value) for value in node.numbers))),
            ("b", [TRUE_TOKEN if value else FALSE_TOKEN for value in node.booleans]),
        )
        tests = [_contains_any(f'{path}["{kind}"]', tokens) for kind, tokens in wanted if tokens]
        return tests[0] if len(tests) == 1 else f"({' or '.join(tests)})"
    return _range(node, f'{path}["{"n" if node.numeric else "s"}"]')


def _range(node: Range, values: str) -> str:
    def token(bound: int | float | str) -> str:
        return f'"{string_token(bound) if isinstance(bound, str) else number_token(bound)}"'

    def within(position: int) -> str:
        value = f"{values}[{position}]"
        tests = [f"exists {value}"]
        if node.lower is not None:
            tests.append(f"{value} {'>=' if node.lower_inclusive else '>'} {token(node.lower)}")
        if node.upper is not None:
            tests.append(f"{value} {'<=' if node.upper_inclusive else '<'} {token(node.upper)}")
        return f"({' and '.join(tests)})"

    if node.upper is None:
        return within(0)  # the greatest value is first
    if node.lower is None:
        positions = range(2)  # the least is second, or first when it is the only one
    else:
        positions = range(MAX_RANGE_VALUES)
    return f"({' or '.join(within(position) for position in positions)})"
