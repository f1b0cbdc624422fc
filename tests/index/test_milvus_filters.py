"""Filters in Milvus (:mod:`index.milvus.filters`) mean what they mean in the embedded store.

The same documents go into a real Milvus server (``milvus-lite``: a collection of an id, the
:func:`filterable` JSON and a tiny vector) and into an embedded
:class:`index.embedded.store.Store`; for hand-written edge cases and for filters drawn at random
over the whole grammar, Milvus's ``query(filter=expression(...))`` must return exactly the ids
the store matches. The metadata is
chosen to hit every rule: nested objects, lists (mixed, empty, of lists), a missing key, unicode,
quotes, backslashes, newlines and NUL in strings and keys, NaN, over-long strings, booleans
against 1, 1 against 1.0, -0.0, integers past 2**53 and 2**63, ±1e22 and infinities.

The documents and filters come from :data:`DEFAULT_SEED` unless ``FRACTAL_FUZZ_SEED`` says otherwise
(``random``: a new seed each run, shown in a failure). Also here: the tokens' order, the write-time
refusals and the expression's size at the grammar's limits.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from benchmarks.harness.processes import MilvusServer
from index.embedded.store import Store
from index.filters import (
    MAX_CONDITIONS,
    MAX_IN_VALUES,
    MAX_KEY_CHARS,
    MAX_STRING_CHARS,
    MAX_VALUES,
    And,
    Equals,
    Or,
    Range,
    parse_filter,
)
from index.milvus.filters import (
    MAX_EXPRESSION_CHARS,
    MAX_FILTERABLE_BYTES,
    MAX_RANGE_VALUES,
    UnfilterableMetadata,
    expression,
    filterable,
    number_token,
    string_token,
)
from index.types import Document

DEFAULT_SEED = "1717"
RANDOM_DOCUMENTS = 300
RANDOM_FILTERS = 400
QUERY_LIMIT = 16_384
"""Milvus's largest ``limit``; far above the number of documents."""

ODD_KEY = "we\"ird\\key\nwith 'quotes'"
KEYS = ["a", "b", "tags", "user", "user.name", "user.age", "x.y", "ключ", "😀", ODD_KEY, "none"]
"""Metadata keys the documents draw from (``none`` never appears in any document)."""
STRINGS = [
    "", "a", "A", "ab", "abc", "b", "z", "é", "e\u0301", "ключ", "😀", "\x00", "a\x00",
    'q"uote', "back\\slash", "new\nline", "tab\t", "1", "1.0", "true", "-", "~", "\uffff",
    "x" * MAX_STRING_CHARS, "x" * (MAX_STRING_CHARS + 1),
]  # fmt: skip
NUMBERS = [
    0, -0.0, 1, 1.0, -1, 2, 2.5, -2.5, 3, 10, 1e-300, 5e-324, -5e-324, 1e22, -1e22, 1e300,
    -1e300, 2**53, 2**53 + 1, float(2**53), 2**63 - 1, -(2**63), 2**64, float(2**63),
    9.999999999999999e21, float("inf"), float("-inf"), float("nan"),
]  # fmt: skip
SCALARS: list = [*STRINGS, *NUMBERS, True, False, None]


def _fuzz_seed() -> int:
    seed = os.environ.get("FRACTAL_FUZZ_SEED", DEFAULT_SEED)
    return random.SystemRandom().randrange(2**32) if seed == "random" else int(seed)


SEED = _fuzz_seed()
"""Draws the random documents, and (plus one) the random filters."""


# -- documents ----------------------------------------------------------------------------------


def _value(rng: random.Random, depth: int) -> object:
    roll = rng.random()
    if roll < 0.55 or depth >= 2:
        return rng.choice(SCALARS)
    if roll < 0.85:  # a list: mixed, empty, sometimes holding a list or an object
        return [_value(rng, depth + 1) for _ in range(rng.randrange(0, 6))]
    return {rng.choice(["name", "age", "y"]): _value(rng, depth + 1) for _ in range(2)}


def _random_metadata(rng: random.Random) -> dict:
    keys = rng.sample([key for key in KEYS if key != "none"], rng.randrange(0, 6))
    return {key: _value(rng, 0) for key in keys}


EDGE_METADATA = [
    {},
    {"a": 1},
    {"a": 1.0},
    {"a": True},
    {"a": "1"},
    {"a": [1, "1", True]},
    {"a": None},
    {"a": []},
    {"a": [[1, 2]]},
    {"a": float("nan")},
    {"a": -0.0},
    {"a": 2**53 + 1},
    {"a": float(2**53)},
    {"a": 2**63 - 1},
    {"a": float(2**63)},
    {"a": 2**64 + 1},
    {"a": [1e22, -1e22]},
    {"a": float("inf")},
    {"a": "x" * (MAX_STRING_CHARS + 1)},
    {"a": "x" * MAX_STRING_CHARS},
    {"user": {"name": "Zoë", "age": 41}},
    {"user.name": "Zoë"},
    {"user": {"name": {"first": "Zoë"}}},
    {"user": [{"name": "in a list"}]},
    {ODD_KEY: 'q"uote'},
    {"ключ": ["😀", "back\\slash", "new\nline"]},
    {"tags": [f"t{i:02d}" for i in range(MAX_RANGE_VALUES)]},
    {"tags": list(range(MAX_RANGE_VALUES)) + [f"t{i:02d}" for i in range(MAX_RANGE_VALUES)]},
    {"tags": [float(i) for i in range(MAX_RANGE_VALUES)] + list(range(MAX_RANGE_VALUES))},
    {"tags": [3, 1, 2]},
    {"tags": [1, 7]},
    {"a": [5, "b", False]},
    {"k" * (MAX_KEY_CHARS + 1): 1, "b": 1},
]
"""Documents for the edge cases: every rule of the grammar's semantics, one at a time."""


@pytest.fixture(scope="module")
def documents() -> dict[str, dict]:
    rng = random.Random(SEED)
    corpus = {f"edge-{i:02d}": metadata for i, metadata in enumerate(EDGE_METADATA)}
    for i in range(RANDOM_DOCUMENTS):
        corpus[f"doc-{i:03d}"] = _random_metadata(rng)
    return corpus


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, documents: dict[str, dict]) -> Iterator[Store]:
    store = Store(tmp_path_factory.mktemp("milvus-filters") / "store.sqlite", dim=2)
    vector = np.ones(2, dtype=np.float32)
    store.upsert([Document(doc_id, "", vector, metadata) for doc_id, metadata in documents.items()])
    yield store
    store.close()


@pytest.fixture(scope="module")
def milvus(milvus_server: MilvusServer, documents: dict[str, dict]) -> Iterator[tuple]:
    """A client and the name of a collection holding the documents' filterable values."""
    from pymilvus import DataType, MilvusClient

    logging.getLogger("pymilvus").setLevel(logging.CRITICAL)
    client = MilvusClient(uri=milvus_server.uri)
    name = f"milvus_filters_{uuid.uuid4().hex[:12]}"
    schema = client.create_schema(auto_id=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("filterable", DataType.JSON)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=2)
    index = client.prepare_index_params()
    index.add_index("vector", index_type="FLAT", metric_type="IP")
    client.create_collection(name, schema=schema, index_params=index)
    rows = [
        {"id": doc_id, "filterable": filterable(metadata), "vector": [1.0, 1.0]}
        for doc_id, metadata in documents.items()
    ]
    client.insert(name, rows)
    client.load_collection(name)
    try:
        yield client, name
    finally:
        client.drop_collection(name)
        client.close()


def _both(store: Store, milvus: tuple, value: object) -> tuple[set[str], set[str]]:
    """The ids the store matches and the ids Milvus returns, for one filter (a JSON value)."""
    node = parse_filter(value)
    embedded = set(store.doc_ids_of(store.rows_matching(node).tolist()))
    client, name = milvus
    hits = client.query(name, filter=expression(node), output_fields=["id"], limit=QUERY_LIMIT)
    return embedded, {hit["id"] for hit in hits}


# -- the same documents match, in Milvus and in the store ---------------------------------------

EDGE_FILTERS = [
    {"key": "a", "eq": 1},
    {"key": "a", "eq": 1.0},
    {"key": "a", "eq": True},
    {"key": "a", "eq": False},
    {"key": "a", "eq": "1"},
    {"key": "a", "in": [1, "1", True]},
    {"key": "a", "eq": 0},
    {"key": "a", "eq": 2**53},
    {"key": "a", "eq": 2**53 + 1},
    {"key": "a", "gt": 2**53},
    {"key": "a", "gte": 2**63 - 1},
    {"key": "a", "gt": 2**63 - 1},
    {"key": "a", "eq": 2**64},
    {"key": "a", "gte": 1e22},
    {"key": "a", "lte": -1e22},
    {"key": "a", "gt": -1e22, "lt": 1e22},
    {"key": "a", "gt": 0},
    {"key": "a", "lt": 0},
    {"key": "a", "gte": 0, "lte": 0},
    {"key": "a", "gte": ""},
    {"key": "a", "eq": "x" * MAX_STRING_CHARS},
    {"key": "a", "gt": "x" * (MAX_STRING_CHARS - 1)},
    {"key": "a", "exists": True},
    {"key": "a", "exists": False},
    {"not": {"key": "a", "eq": 1}},
    {"not": {"key": "a", "gt": 0}},
    {"not": {"not": {"key": "a", "eq": 1}}},
    {"key": "user", "exists": True},
    {"key": "user.name", "eq": "Zoë"},
    {"key": "user.name", "exists": True},
    {"key": "user.name.first", "gte": "Z"},
    {"key": "user.age", "gt": 40},
    {"key": ODD_KEY, "eq": 'q"uote'},
    {"key": "ключ", "in": ["😀", "new\nline", "back\\slash"]},
    {"key": "ключ", "gt": "new", "lt": "new\x7f"},
    {"key": "tags", "gte": "t15", "lte": "t15"},
    {"key": "tags", "gt": "t00", "lt": "t01"},
    {"key": "tags", "gte": "t14", "lte": "t14"},  # the last position: [max, min, rest...]
    {"key": "tags", "gt": 13.5, "lt": 14.5},
    {"key": "tags", "gte": 15, "lt": 16},
    {"key": "tags", "gt": 1.5, "lt": 2.5},
    {"key": "tags", "gt": 4, "lt": 6},
    {"key": "tags", "lte": 1},
    {"key": "tags", "gte": 7},
    {"key": "tags", "eq": 2.0},
    {"key": "k" * MAX_KEY_CHARS, "exists": True},
    {"key": "none", "exists": False},
    {"not": {"key": "none", "eq": 1}},
    {"and": [{"key": "a", "exists": True}, {"not": {"key": "a", "eq": 1}}]},
    {"and": [{"not": {"key": "a", "exists": True}}, {"not": {"key": "b", "exists": True}}]},
    {"or": [{"key": "a", "eq": "b"}, {"key": "a", "eq": False}, {"key": "tags", "eq": "t03"}]},
]


@pytest.mark.parametrize("value", EDGE_FILTERS, ids=[str(i) for i in range(len(EDGE_FILTERS))])
def test_edge_cases_match_the_same_documents(store: Store, milvus: tuple, value: object) -> None:
    embedded, found = _both(store, milvus, value)
    assert found == embedded, (
        f"{value}: Milvus alone {found - embedded}, store alone {embedded - found}"
    )


def _condition(rng: random.Random, documents: list[dict]) -> dict:
    key = rng.choice(KEYS)
    kind = rng.choice(["eq", "in", "range", "range", "exists"])
    if kind == "exists":
        return {"key": key, "exists": rng.random() < 0.7}

    def comparable(numeric: bool | None = None) -> object:
        """A value a filter may compare with, often one some document holds under ``key``."""
        while True:
            held = documents[rng.randrange(len(documents))].get(key)
            if isinstance(held, list) and held:
                held = rng.choice(held)
            value = held if held is not None and rng.random() < 0.5 else rng.choice(SCALARS)
            if isinstance(value, bool):
                if numeric is None:
                    return value
            elif isinstance(value, str):
                if len(value) <= MAX_STRING_CHARS and numeric is not True:
                    return value
            elif isinstance(value, int | float) and numeric is not False:
                if math.isfinite(value) and abs(value) <= 1e22:
                    return value

    if kind == "eq":
        return {"key": key, "eq": comparable()}
    if kind == "in":
        return {"key": key, "in": [comparable() for _ in range(rng.randrange(1, 5))]}
    numeric = rng.random() < 0.6
    lower, upper = comparable(numeric), comparable(numeric)
    if rng.random() < 0.6 and (lower > upper if numeric else str(lower) > str(upper)):
        lower, upper = upper, lower  # mostly a non-empty range
    condition = {"key": key}
    sides = rng.choice(["lower", "upper", "both", "both"])
    if sides != "upper":
        condition[rng.choice(["gt", "gte"])] = lower
    if sides != "lower":
        condition[rng.choice(["lt", "lte"])] = upper
    return condition


def _random_filter(rng: random.Random, documents: list[dict], depth: int = 0) -> dict:
    roll = rng.random()
    if depth >= 4 or roll < 0.45:
        return _condition(rng, documents)
    if roll < 0.6:
        return {"not": _random_filter(rng, documents, depth + 1)}
    children = [_random_filter(rng, documents, depth + 1) for _ in range(rng.randrange(1, 4))]
    return {"and" if roll < 0.8 else "or": children}


def test_random_filters_match_the_same_documents(
    store: Store, milvus: tuple, documents: dict[str, dict]
) -> None:
    rng = random.Random(SEED + 1)
    metadata = list(documents.values())
    matched = 0
    for _ in range(RANDOM_FILTERS):
        value = _random_filter(rng, metadata)
        embedded, found = _both(store, milvus, value)
        assert found == embedded, (
            f"seed {SEED}, {value}: Milvus alone {found - embedded}, store alone {embedded - found}"
        )
        matched += 0 < len(embedded) < len(documents)
    assert matched > RANDOM_FILTERS // 3, "too few filters select some documents but not all"


# -- tokens -------------------------------------------------------------------------------------


def test_tokens_order_as_the_store_orders() -> None:
    rng = random.Random(5)
    alphabet = set("-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz")
    characters = ["\x00", "\x01", "a", "b", "\x7f", "\x80", "é", "\u07ff", "\u0800", "\uffff"]
    characters += ["\U00010000", "😀", "\U0010ffff"]
    strings = {"".join(rng.choices(characters, k=rng.randrange(0, 7))) for _ in range(3000)}
    strings |= set(STRINGS)
    by_token = sorted(strings, key=string_token)
    assert by_token == sorted(strings)  # Python orders str by code point, as SQLite orders UTF-8
    assert len({string_token(value) for value in strings}) == len(strings)
    assert all(set(string_token(value)) <= alphabet for value in strings)

    numbers = [value for value in NUMBERS if not (isinstance(value, float) and math.isnan(value))]
    numbers += [rng.randrange(-(2**63), 2**63) for _ in range(2000)]
    numbers += [rng.randrange(-(2**20), 2**20) for _ in range(500)]
    numbers += [2**62 + rng.randrange(-4, 5) for _ in range(50)]
    numbers += [math.ldexp(rng.uniform(-1, 1), rng.randrange(-1080, 1024)) for _ in range(2000)]
    numbers += [float(n) for n in numbers[-3000:-2000]]
    tokens = [number_token(value) for value in numbers]
    assert all(set(token) <= alphabet and len(token) == 15 for token in tokens)
    for _ in range(20_000):  # Python compares an int with a float exactly, as SQLite does
        i, j = rng.randrange(len(numbers)), rng.randrange(len(numbers))
        assert (tokens[i] < tokens[j]) == (numbers[i] < numbers[j]), (numbers[i], numbers[j])
        assert (tokens[i] == tokens[j]) == (numbers[i] == numbers[j]), (numbers[i], numbers[j])
    assert number_token(-0.0) == number_token(0) and number_token(1) == number_token(1.0)
    assert number_token(2**53 + 1) > number_token(float(2**53))


# -- what Milvus cannot hold is refused when written --------------------------------------------


def test_more_values_of_one_type_under_one_key_than_a_range_can_test_are_refused() -> None:
    within = [f"t{i}" for i in range(MAX_RANGE_VALUES)]
    filterable({"tags": within, "n": list(range(MAX_RANGE_VALUES)), "both": within + [1, 2]})
    filterable({"n": list(range(MAX_RANGE_VALUES)) + [float(i) for i in range(MAX_RANGE_VALUES)]})
    filterable({"tags": within + within + [True, False]})  # repeats and booleans do not count
    for metadata, key, kind in [
        ({"tags": [*within, "one more"]}, "tags", "strings"),
        ({"user": {"scores": list(range(MAX_RANGE_VALUES + 1))}}, "user.scores", "numbers"),
    ]:
        with pytest.raises(UnfilterableMetadata) as caught:
            filterable(metadata)
        message = str(caught.value)
        assert caught.value.key == key and caught.value.limit == MAX_RANGE_VALUES
        assert f"{key!r} holds {MAX_RANGE_VALUES + 1} distinct {kind}" in message
        assert f"at most {MAX_RANGE_VALUES} {kind} per key" in message
        assert "\n" not in message and isinstance(caught.value, ValueError)
    # A key no filter can name (too long) is not stored, so it is never refused.
    assert filterable({"k" * (MAX_KEY_CHARS + 1): list(range(100))}) == {}


def test_metadata_beyond_milvus_json_limit_is_refused() -> None:
    fits = {f"key{i}": "x" * 500 for i in range(80)}
    assert len(json.dumps(filterable(fits))) < MAX_FILTERABLE_BYTES
    with pytest.raises(UnfilterableMetadata, match="at most 65,536 bytes in one JSON") as caught:
        filterable({f"key{i}": "x" * 1000 for i in range(80)})
    assert caught.value.key is None and caught.value.limit == MAX_FILTERABLE_BYTES


def test_the_field_must_be_a_plain_name() -> None:
    assert expression(Equals("a", numbers=(1,)), "meta_1").startswith('(exists meta_1["k')
    for bad in ["", "1a", 'a"]', "a b", "a[0]"]:
        with pytest.raises(ValueError, match="not a Milvus field name"):
            expression(Equals("a", numbers=(1,)), bad)


def test_expressions_stay_within_the_stated_bound_at_the_grammar_limits() -> None:
    longest = "\U0010ffff" * (MAX_STRING_CHARS - 3)  # 4 bytes of UTF-8 each
    ins = MAX_VALUES // MAX_IN_VALUES
    conditions = [
        Equals(f"{'k' * 255}{i}", strings=tuple(f"{longest}{j:03x}" for j in range(MAX_IN_VALUES)))
        for i in range(ins)
    ]
    conditions += [
        Range(f"{'k' * 254}{i:02d}", lower=longest + "aaa", upper=longest + "bbb")
        for i in range(MAX_CONDITIONS - ins)
    ]
    worst = Or((And(tuple(conditions[: MAX_CONDITIONS // 2])), And(tuple(conditions[32:]))))
    size = len(expression(worst, "f" * 255))
    assert 0.9 * MAX_EXPRESSION_CHARS < size <= MAX_EXPRESSION_CHARS
