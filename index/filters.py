"""Metadata filters: a small JSON grammar, parsed into typed nodes and compiled to SQL.

A filter is one JSON object, either a **condition** on one metadata key or a **combinator**::

    {"key": "class", "eq": "Business"}                   equality (string, number or boolean)
    {"key": "class", "in": ["Business", "Sports"]}       any of these values (1 … 1,024 of them)
    {"key": "year", "gte": 2020, "lt": 2024}             a range: gt / gte and / or lt / lte,
                                                         both bounds numbers or both strings
    {"key": "source", "exists": true}                    the key is present (any value, null too)
    {"and": [filter, ...]}   {"or": [filter, ...]}       1 … 64 filters each
    {"not": filter}                                      documents the filter does not match

Semantics, per document:

- Keys name metadata members; a nested object's members are named by dotted paths
  (``{"user": {"country": "FR"}}`` has the key ``user.country``, and ``user`` exists).
- A list value matches when any of its elements does (``{"tags": ["a", "b"]}`` matches
  ``{"key": "tags", "eq": "a"}``); all bounds of one range condition apply to the same element.
- Comparisons never cross types: ``1`` equals ``1.0`` but not ``"1"`` or ``true``; numeric
  bounds select numbers only, string bounds strings only, ordered by Unicode code point.
- A document without the key matches no condition on it except ``"exists": false``, and so
  matches ``{"not": {"key": "k", "eq": 1}}``.

Limits: 8 levels of nesting, 64 conditions, 1,024 values per ``in`` and 4,096 in all, keys of
1 … 256 characters, strings of at most 1,024, numbers within ±1e22. Anything else is a
:class:`FilterError` that carries the JSON path of the offending part (``filter.and[1].gte``),
which the service reports as the error's ``param``.

Pure Python: no FAISS, no FastAPI; the store (:mod:`index.embedded.store`) runs the SQL this
module makes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Union

MAX_DEPTH = 8
MAX_CONDITIONS = 64
MAX_IN_VALUES = 1024
MAX_VALUES = 4096
"""Values in all the ``in`` lists of one filter (each is a parameter of one SQL statement)."""
MAX_KEY_CHARS = 256
MAX_STRING_CHARS = 1024
MAX_INTEGER = 2**63 - 1
"""Integers beyond SQLite's 64 bits are compared as floats."""
MAX_MAGNITUDE = 10**22
"""Numbers are within ±1e22: the largest power of ten a float holds exactly, so that this check
and the schema's ``minimum`` / ``maximum`` (JSON decimals) agree on every value, integers
beyond any float and floats next to the bound included (int64 and nanosecond timestamps fit)."""

LOWER_BOUNDS = ("gt", "gte")
UPPER_BOUNDS = ("lt", "lte")
OPERATORS = ("eq", "in", *LOWER_BOUNDS, *UPPER_BOUNDS, "exists")
COMBINATORS = ("and", "or", "not")

TRUE_VALUE = b"\x01"
FALSE_VALUE = b"\x00"
NO_VALUE = b""
"""How the store keeps what JSON has and SQL lacks. SQLite orders NULL < numbers < text < blobs
and compares values of different storage classes as unequal, so booleans are kept as one-byte
blobs (no number or string equals them) and a key present without a comparable value (null, an
empty list, an object) as the empty blob, which no condition but ``exists`` matches."""

Scalar = str | int | float | bool


class FilterError(ValueError):
    """A filter that is not valid; ``path`` is the JSON path of the offending part."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(f"{path}: {message}")
        self.message = message
        self.path = path


@dataclass(frozen=True)
class Equals:
    """``key`` has one of these values (``eq`` is one value, ``in`` several); kept apart by type
    so that ``True`` and ``1`` never compare equal, here or in a cache key."""

    key: str
    strings: tuple[str, ...] = ()
    numbers: tuple[int | float, ...] = ()
    booleans: tuple[bool, ...] = ()


@dataclass(frozen=True)
class Range:
    """``key`` has one value between the bounds (``None``: unbounded on that side); the bounds
    are both numbers or both strings."""

    key: str
    lower: int | float | str | None = None
    lower_inclusive: bool = False
    upper: int | float | str | None = None
    upper_inclusive: bool = False

    @property
    def numeric(self) -> bool:
        bound = self.lower if self.lower is not None else self.upper
        return not isinstance(bound, str)


@dataclass(frozen=True)
class Exists:
    """``key`` is present (``present=True``) or absent."""

    key: str
    present: bool = True


@dataclass(frozen=True)
class And:
    children: tuple[Filter, ...]


@dataclass(frozen=True)
class Or:
    children: tuple[Filter, ...]


@dataclass(frozen=True)
class Not:
    child: Filter


Filter = Union[Equals, Range, Exists, And, Or, Not]  # noqa: UP007 (a forward reference)
"""A parsed filter: hashable, and equal for filters that mean the same to the parser."""


# -- parsing ------------------------------------------------------------------------------------


def parse_filter(value: object, path: str = "filter") -> Filter:
    """The typed filter of a JSON value (already decoded), or :class:`FilterError`."""
    counter = [0, 0]  # conditions, values in "in" lists
    return _parse(value, path, 1, counter)


def parse_filter_json(text: str, path: str = "filter") -> Filter:
    """The typed filter of a JSON text (a query parameter), or :class:`FilterError`."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise FilterError(f"is not valid JSON ({exc})", path) from None
    return parse_filter(value, path)


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", str: "a string", list: "a list", dict: "an object"}.get(
        type(value), "a number" if isinstance(value, int | float) else type(value).__name__
    )


def _parse(value: object, path: str, depth: int, counter: list[int]) -> Filter:
    if not isinstance(value, dict):
        raise FilterError(
            f"a filter must be an object (a condition, or and / or / not), got {_type_name(value)}",
            path,
        )
    if not value:
        raise FilterError(
            'an empty filter; give a condition ({"key": ..., "eq": ...}) or and / or / not',
            path,
        )
    combinators = [name for name in COMBINATORS if name in value]
    if combinators:
        return _parse_combinator(value, combinators, path, depth, counter)
    return _parse_condition(value, path, counter)


def _parse_combinator(
    value: dict, combinators: list[str], path: str, depth: int, counter: list[int]
) -> Filter:
    name = combinators[0]
    extra = [key for key in value if key != name]
    if extra:
        raise FilterError(
            f"{name!r} must be the only member of its object; found {extra[0]!r} beside it "
            "(wrap conditions in and / or)",
            f"{path}.{extra[0]}",
        )
    where = f"{path}.{name}"
    if depth >= MAX_DEPTH:
        raise FilterError(f"filters nest at most {MAX_DEPTH} levels deep", where)
    if name == "not":
        return Not(_parse(value[name], where, depth + 1, counter))
    children = value[name]
    if not isinstance(children, list) or not children:
        raise FilterError(
            f"{name!r} takes a non-empty list of filters, got {_type_name(children)}"
            + (" (empty)" if isinstance(children, list) else ""),
            where,
        )
    if len(children) > MAX_CONDITIONS:
        raise FilterError(f"{name!r} takes at most {MAX_CONDITIONS} filters", where)
    parsed = tuple(
        _parse(child, f"{where}[{position}]", depth + 1, counter)
        for position, child in enumerate(children)
    )
    return And(parsed) if name == "and" else Or(parsed)


def _parse_condition(value: dict, path: str, counter: list[int]) -> Filter:
    counter[0] += 1
    if counter[0] > MAX_CONDITIONS:
        raise FilterError(f"a filter holds at most {MAX_CONDITIONS} conditions", path)
    for member in value:
        if member != "key" and member not in OPERATORS:
            raise FilterError(
                f'unknown operator {member!r}; a condition has "key" and one of '
                f"{', '.join(OPERATORS)} (or and / or / not to combine filters)",
                f"{path}.{member}",
            )
    if "key" not in value:
        raise FilterError('a condition needs a "key": the metadata key it tests', path)
    key = value["key"]
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_CHARS:
        raise FilterError(
            f"the key must be a string of 1 to {MAX_KEY_CHARS} characters, got "
            + (f"{len(key)} characters" if isinstance(key, str) else _type_name(key)),
            f"{path}.key",
        )
    operators = [member for member in value if member != "key"]
    if not operators:
        raise FilterError(f"a condition needs one operator: {', '.join(OPERATORS)}", path)
    bounds = [op for op in operators if op in LOWER_BOUNDS + UPPER_BOUNDS]
    if len(operators) > 1 and len(bounds) != len(operators):
        raise FilterError(
            "one operator per condition (only a lower and an upper bound may be combined); "
            f"found {operators[0]!r} and {operators[1]!r}",
            f"{path}.{operators[1]}",
        )
    operator = operators[0]
    where = f"{path}.{operator}"
    if operator == "exists":
        present = value[operator]
        if not isinstance(present, bool):
            raise FilterError(f'"exists" takes true or false, got {_type_name(present)}', where)
        return Exists(key, present)
    if operator in ("eq", "in"):
        values = value[operator]
        if operator == "eq":
            return _equals(key, [_scalar(values, where)])
        if not isinstance(values, list) or not values:
            raise FilterError(
                f'"in" takes a non-empty list of values, got {_type_name(values)}'
                + (" (empty)" if isinstance(values, list) else ""),
                where,
            )
        if len(values) > MAX_IN_VALUES:
            raise FilterError(
                f'"in" takes at most {MAX_IN_VALUES} values, got {len(values)}', where
            )
        counter[1] += len(values)
        if counter[1] > MAX_VALUES:
            raise FilterError(
                f'the "in" lists of a filter hold at most {MAX_VALUES} values in all', where
            )
        return _equals(key, [_scalar(item, f"{where}[{i}]") for i, item in enumerate(values)])
    return _range(key, value, bounds, path)


def _scalar(value: object, path: str) -> Scalar:
    """A value a condition compares with: a string, a finite number or a boolean."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        if len(value) > MAX_STRING_CHARS:
            raise FilterError(
                f"strings are at most {MAX_STRING_CHARS} characters, got {len(value)}", path
            )
        return value
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise FilterError("numbers must be finite", path)
        if not -MAX_MAGNITUDE <= value <= MAX_MAGNITUDE:  # exact for ints of any size
            raise FilterError("numbers are at most 1e22 in magnitude", path)
        return number(value)
    hint = ' (use "exists" to test for a key)' if value is None else ""
    raise FilterError(
        f"expected a string, a number or a boolean, got {_type_name(value)}{hint}", path
    )


def number(value: int | float) -> int | float:
    """A JSON number as SQLite compares it: an integer when it fits in 64 bits, else a float."""
    if isinstance(value, int) and not -MAX_INTEGER - 1 <= value <= MAX_INTEGER:
        return float(value)
    return value


def _equals(key: str, values: list[Scalar]) -> Equals:
    def unique(items: list) -> tuple:
        return tuple(dict.fromkeys(items))

    return Equals(
        key,
        strings=unique([v for v in values if isinstance(v, str)]),
        numbers=unique(
            [v for v in values if isinstance(v, int | float) and v is not True and v is not False]
        ),
        booleans=unique([v for v in values if isinstance(v, bool)]),
    )


def _range(key: str, value: dict, bounds: list[str], path: str) -> Range:
    lower = [op for op in bounds if op in LOWER_BOUNDS]
    upper = [op for op in bounds if op in UPPER_BOUNDS]
    for same_side in (lower, upper):
        if len(same_side) > 1:
            raise FilterError(
                f"give one bound per side, not both {same_side[0]!r} and {same_side[1]!r}",
                f"{path}.{same_side[1]}",
            )
    kinds = {}
    for op in bounds:
        bound = value[op]
        where = f"{path}.{op}"
        if isinstance(bound, bool) or not isinstance(bound, str | int | float):
            raise FilterError(f"{op!r} takes a number or a string, got {_type_name(bound)}", where)
        kinds[op] = "string" if isinstance(bound, str) else "number"
        _scalar(bound, where)
    if len(set(kinds.values())) > 1:
        raise FilterError(
            "both bounds of a range must be numbers or both strings", f"{path}.{bounds[1]}"
        )
    low, high = (lower[0] if lower else None), (upper[0] if upper else None)
    return Range(
        key,
        lower=None if low is None else _bound(value[low]),
        lower_inclusive=low == "gte",
        upper=None if high is None else _bound(value[high]),
        upper_inclusive=high == "lte",
    )


def _bound(value: str | int | float) -> str | int | float:
    return value if isinstance(value, str) else number(value)


# -- SQL ----------------------------------------------------------------------------------------


def to_sql(node: Filter, values_table: str, rows_table: str) -> tuple[str, list]:
    """One ``SELECT row_id`` of the rows that match (possibly with repeats), and its parameters.

    ``values_table`` holds ``(key, value, row_id)`` with an index led by ``(key, value)`` (see
    :mod:`index.embedded.store`): every condition is one search of that index. ``rows_table``
    lists every present row (``row_id``); ``not`` and ``"exists": false`` subtract from it.
    """
    params: list = []
    sql = _sql(node, values_table, rows_table, params)
    return sql, params


def _sql(node: Filter, values: str, rows: str, params: list) -> str:
    if isinstance(node, Equals):
        booleans = [TRUE_VALUE if value else FALSE_VALUE for value in node.booleans]
        items = [*node.strings, *node.numbers, *booleans]
        params.append(node.key)
        params.extend(items)
        test = "value = ?" if len(items) == 1 else f"value IN ({', '.join('?' * len(items))})"
        return f"SELECT row_id FROM {values} WHERE key = ? AND {test}"
    if isinstance(node, Range):
        params.append(node.key)
        tests = []
        if node.lower is not None:
            tests.append("value >= ?" if node.lower_inclusive else "value > ?")
            params.append(node.lower)
        if node.upper is not None:
            tests.append("value <= ?" if node.upper_inclusive else "value < ?")
            params.append(node.upper)
        # Keep the scan inside one storage class: numbers sort below '' (the least string),
        # strings below x'' (the least blob).
        if node.numeric and node.upper is None:
            tests.append("value < ''")
        if not node.numeric:
            if node.lower is None:
                tests.append("value >= ''")
            if node.upper is None:
                tests.append("value < x''")
        return f"SELECT row_id FROM {values} WHERE key = ? AND {' AND '.join(tests)}"
    if isinstance(node, Exists):
        params.append(node.key)
        present = f"SELECT row_id FROM {values} WHERE key = ?"
        return present if node.present else f"SELECT row_id FROM {rows} EXCEPT {present}"
    if isinstance(node, Not):
        inner = _sql(node.child, values, rows, params)
        return f"SELECT row_id FROM {rows} EXCEPT SELECT row_id FROM ({inner})"
    if isinstance(node, Or):
        parts = [_sql(child, values, rows, params) for child in node.children]
        return " UNION ".join(f"SELECT row_id FROM ({part})" for part in parts)
    # ``a and not b`` is ``a EXCEPT b``: only an ``and`` of negations alone subtracts from every
    # row (compound operators apply left to right, so the negations come last).
    positive = [child for child in node.children if _negated(child) is None]
    negative = [n for child in node.children if (n := _negated(child)) is not None]
    if not positive:
        return _sql(Not(Or(tuple(negative))), values, rows, params)
    parts = [_sql(child, values, rows, params) for child in positive]
    excluded = [_sql(child, values, rows, params) for child in negative]
    return " INTERSECT ".join(f"SELECT row_id FROM ({part})" for part in parts) + "".join(
        f" EXCEPT SELECT row_id FROM ({part})" for part in excluded
    )


def _negated(node: Filter) -> Filter | None:
    """What ``node`` negates, when it is a negation (``not``, ``"exists": false``)."""
    if isinstance(node, Not):
        return node.child
    if isinstance(node, Exists) and not node.present:
        return Exists(node.key)
    return None


def indexed_values(metadata: dict) -> list[tuple[str, object]]:
    """The ``(key, value)`` pairs a document's metadata is found by: every member by its dotted
    path (nested objects too), each scalar element of a list, and :data:`NO_VALUE` for a key
    present with nothing comparable (null, NaN, an empty list, an object, a list in a list, a
    string longer than any filter may compare with). Pairs SQLite sees as equal (``1`` and
    ``1.0``) may repeat; the store keeps one."""
    pairs: dict[tuple[str, type, object], None] = {}

    def add(key: str, value: object) -> None:
        pairs[(key, type(value), value)] = None

    def visit(key: str, value: object, in_list: bool) -> None:
        if isinstance(value, bool):
            add(key, TRUE_VALUE if value else FALSE_VALUE)
        elif isinstance(value, str):
            add(key, value if len(value) <= MAX_STRING_CHARS else NO_VALUE)
        elif isinstance(value, int | float):
            add(key, NO_VALUE if isinstance(value, float) and math.isnan(value) else number(value))
        elif isinstance(value, list) and not in_list:
            if not value:
                add(key, NO_VALUE)
            for item in value:
                visit(key, item, True)
        elif isinstance(value, dict) and not in_list:
            add(key, NO_VALUE)
            for name, member in value.items():
                visit(f"{key}.{name}", member, False)
        else:
            add(key, NO_VALUE)

    for name, member in metadata.items():
        visit(str(name), member, False)
    return [(key, value) for key, _, value in pairs]


# -- the grammar as JSON Schema -----------------------------------------------------------------


def json_schemas(ref_prefix: str) -> dict[str, dict]:
    """The grammar as JSON Schema, for an API's contract: named schemas (``MetadataFilter`` and
    its parts) whose ``$ref`` s start with ``ref_prefix`` (``#/components/schemas/``). It states
    everything about one filter object but the limits across levels (:data:`MAX_DEPTH`,
    :data:`MAX_CONDITIONS` in all, :data:`MAX_VALUES` in all), which the parser checks."""

    def ref(name: str) -> dict:
        return {"$ref": f"{ref_prefix}{name}"}

    key = {"type": "string", "minLength": 1, "maxLength": MAX_KEY_CHARS}
    number_schema = {"type": "number", "minimum": -MAX_MAGNITUDE, "maximum": MAX_MAGNITUDE}
    string_schema = {"type": "string", "maxLength": MAX_STRING_CHARS}
    scalar = {"anyOf": [string_schema, number_schema, {"type": "boolean"}]}

    def condition(operators: dict[str, dict], required: list[str], **extra: object) -> dict:
        return {
            "type": "object",
            "properties": {"key": key, **operators},
            "required": ["key", *required],
            "additionalProperties": False,
            **extra,
        }

    def bounds(kind: dict) -> dict:
        """A range whose bounds are all of one kind: one or two, at most one per side."""
        return condition(
            {op: kind for op in (*LOWER_BOUNDS, *UPPER_BOUNDS)},
            [],
            minProperties=2,
            allOf=[
                {"not": {"required": list(LOWER_BOUNDS)}},
                {"not": {"required": list(UPPER_BOUNDS)}},
            ],
        )

    children = {
        "type": "array",
        "minItems": 1,
        "maxItems": MAX_CONDITIONS,
        "items": ref("MetadataFilter"),
    }
    return {
        "MetadataFilter": {
            "description": "A metadata filter: a condition on one key ({key, eq | in | gt/gte "
            "and/or lt/lte | exists}) or and / or (1 to 64 filters) / not (one filter). At "
            f"most {MAX_DEPTH} levels, {MAX_CONDITIONS} conditions and {MAX_VALUES} 'in' "
            "values in all.",
            "oneOf": [
                condition({"eq": scalar}, ["eq"]),
                condition(
                    {
                        "in": {
                            "type": "array",
                            "minItems": 1,
                            "maxItems": MAX_IN_VALUES,
                            "items": scalar,
                        }
                    },
                    ["in"],
                ),
                condition({"exists": {"type": "boolean"}}, ["exists"]),
                bounds(number_schema),
                bounds(string_schema),
                {
                    "type": "object",
                    "properties": {"and": children},
                    "required": ["and"],
                    "additionalProperties": False,
                },
                {
                    "type": "object",
                    "properties": {"or": children},
                    "required": ["or"],
                    "additionalProperties": False,
                },
                {
                    "type": "object",
                    "properties": {"not": ref("MetadataFilter")},
                    "required": ["not"],
                    "additionalProperties": False,
                },
            ],
        }
    }
