"""Metadata filters: the grammar (typed nodes, errors with the path of the offending part), the
store's metadata index (what each filter matches, kept in step with upserts and deletes, built for
an existing store) and the SQL it runs (an index search per condition, never a scan of the
documents)."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from index.embedded.store import Store
from index.filters import (
    MAX_CONDITIONS,
    MAX_DEPTH,
    MAX_IN_VALUES,
    And,
    Equals,
    Exists,
    FilterError,
    Not,
    Or,
    Range,
    json_schemas,
    parse_filter,
    parse_filter_json,
)
from index.types import Document

METADATA = [
    {"class": "Business", "year": 2021, "tags": ["a", "b"], "ok": True},
    {"class": "Sports", "year": 2019, "tags": ["b"], "ok": False, "user": {"country": "FR"}},
    {"class": "Business", "year": 2024.5, "note": None},
    {"class": 1, "year": "2020"},
    {},
    {"class": "Sports", "year": 2022, "tags": [], "score": float("nan")},
]


def test_conditions_and_combinators_parse_into_typed_nodes() -> None:
    assert parse_filter({"key": "class", "eq": "Business"}) == Equals("class", ("Business",))
    assert parse_filter({"key": "n", "in": [1, "1", True, 1.0]}) == Equals(
        "n", strings=("1",), numbers=(1,), booleans=(True,)
    )
    assert parse_filter({"key": "year", "gte": 2020, "lt": 2024}) == Range(
        "year", lower=2020, lower_inclusive=True, upper=2024
    )
    assert parse_filter({"key": "d", "lte": "2024-12"}) == Range(
        "d", upper="2024-12", upper_inclusive=True
    )
    assert parse_filter({"key": "k", "exists": False}) == Exists("k", False)
    parsed = parse_filter(
        {
            "and": [
                {"key": "a", "eq": 1},
                {"or": [{"key": "b", "eq": True}, {"not": {"key": "c", "gt": 0}}]},
            ]
        }
    )
    assert parsed == And(
        (Equals("a", numbers=(1,)), Or((Equals("b", booleans=(True,)), Not(Range("c", lower=0)))))
    )
    # A boolean never equals a number, here or as a cache key.
    assert parse_filter({"key": "a", "eq": True}) != parse_filter({"key": "a", "eq": 1})
    assert parse_filter_json('{"key": "a", "eq": 1}') == Equals("a", numbers=(1,))


@pytest.mark.parametrize(
    ("value", "path", "message"),
    [
        ([], "filter", "must be an object"),
        ({}, "filter", "an empty filter"),
        ({"key": "a", "like": "x"}, "filter.like", "unknown operator 'like'"),
        ({"eq": 1}, "filter", 'needs a "key"'),
        ({"key": "", "eq": 1}, "filter.key", "1 to 256 characters"),
        ({"key": 3, "eq": 1}, "filter.key", "got a number"),
        ({"key": "a"}, "filter", "needs one operator"),
        ({"key": "a", "eq": 1, "in": [1]}, "filter.in", "one operator per condition"),
        ({"key": "a", "eq": None}, "filter.eq", 'use "exists"'),
        ({"key": "a", "eq": [1]}, "filter.eq", "got a list"),
        ({"key": "a", "eq": float("inf")}, "filter.eq", "finite"),
        ({"key": "a", "eq": "x" * 1025}, "filter.eq", "at most 1024"),
        ({"key": "a", "in": []}, "filter.in", "non-empty list"),
        ({"key": "a", "in": "x"}, "filter.in", "got a string"),
        ({"key": "a", "in": [1, {}]}, "filter.in[1]", "got an object"),
        ({"key": "a", "in": list(range(MAX_IN_VALUES + 1))}, "filter.in", "at most 1024"),
        ({"key": "a", "gt": True}, "filter.gt", "number or a string, got a boolean"),
        ({"key": "a", "gt": 1, "gte": 2}, "filter.gte", "one bound per side"),
        ({"key": "a", "gt": 1, "lt": "z"}, "filter.lt", "must be numbers or both strings"),
        ({"key": "a", "exists": "yes"}, "filter.exists", "true or false"),
        ({"and": []}, "filter.and", "non-empty list"),
        ({"or": {"key": "a"}}, "filter.or", "got an object"),
        ({"and": [{"key": "a", "eq": 1}], "key": "b"}, "filter.key", "only member"),
        (
            {"and": [{"key": "a", "eq": 1}, {"key": "b", "gte": [2]}]},
            "filter.and[1].gte",
            "number or a string, got a list",
        ),
        ({"not": {"or": [{"key": "a", "eq": 1}, 5]}}, "filter.not.or[1]", "got a number"),
    ],
)
def test_bad_filters_name_the_offending_part(value: object, path: str, message: str) -> None:
    with pytest.raises(FilterError) as caught:
        parse_filter(value)
    assert caught.value.path == path
    assert message in caught.value.message
    assert str(caught.value).startswith(f"{path}: ")


def test_size_limits_and_bad_json() -> None:
    deep: dict = {"key": "a", "eq": 1}
    for _ in range(MAX_DEPTH):
        deep = {"not": deep}
    with pytest.raises(FilterError, match="nest at most") as caught:
        parse_filter(deep)
    assert caught.value.path == "filter" + ".not" * MAX_DEPTH
    many = {"or": [{"key": f"k{i}", "eq": i} for i in range(MAX_CONDITIONS + 1)]}
    with pytest.raises(FilterError, match="at most 64") as caught:
        parse_filter(many)
    assert caught.value.path == "filter.or"
    spread = {"and": [{"or": [{"key": "a", "eq": i} for i in range(40)]}] * 2}
    with pytest.raises(FilterError, match="at most 64 conditions") as caught:
        parse_filter(spread)
    assert caught.value.path == "filter.and[1].or[24]"
    wide = {"or": [{"key": "a", "in": list(range(1000))} for _ in range(5)]}
    with pytest.raises(FilterError, match="4096 values in all") as caught:
        parse_filter(wide)
    assert caught.value.path == "filter.or[4].in"
    with pytest.raises(FilterError, match="not valid JSON") as caught:
        parse_filter_json('{"key": "a", ')
    assert caught.value.path == "filter"
    with pytest.raises(FilterError) as caught:
        parse_filter_json('{"or": [{"key": "a", "eq": 1}, {"key": "b", "ne": 2}]}', path="f")
    assert caught.value.path == "f.or[1].ne"


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "store.sqlite3", dim=4)
    vector = np.ones(4, dtype=np.float32)
    store.upsert([Document(str(i), "text", vector, meta) for i, meta in enumerate(METADATA)])
    return store


def matching(store: Store, value: object) -> list[int]:
    """The positions in :data:`METADATA` of the documents ``value`` matches (rows start at 1)."""
    return [int(row) - 1 for row in store.rows_matching(parse_filter(value))]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"key": "class", "eq": "Business"}, [0, 2]),
        ({"key": "class", "eq": 1}, [3]),
        ({"key": "class", "in": ["Sports", 1]}, [1, 3, 5]),
        ({"key": "year", "gte": 2021}, [0, 2, 5]),
        ({"key": "year", "gt": 2021, "lt": 2024}, [5]),
        ({"key": "year", "lte": 2021}, [0, 1]),
        ({"key": "year", "gte": "2000"}, [3]),  # strings only: "2020"
        ({"key": "year", "lt": "3"}, [3]),
        ({"key": "tags", "eq": "b"}, [0, 1]),  # any element of a list
        ({"key": "tags", "in": ["a", "b"]}, [0, 1]),  # each document once
        ({"key": "ok", "eq": True}, [0]),
        ({"key": "ok", "eq": 1}, []),  # booleans are not numbers
        ({"key": "ok", "eq": False}, [1]),
        ({"key": "user.country", "eq": "FR"}, [1]),
        ({"key": "user", "exists": True}, [1]),
        ({"key": "note", "exists": True}, [2]),  # null: present, equal to nothing
        ({"key": "tags", "exists": True}, [0, 1, 5]),  # an empty list is present
        ({"key": "score", "exists": True}, [5]),  # NaN too
        ({"key": "score", "gte": 0}, []),
        ({"key": "year", "exists": False}, [4]),
        ({"not": {"key": "class", "eq": "Business"}}, [1, 3, 4, 5]),  # a missing key included
        ({"and": [{"key": "class", "eq": "Business"}, {"key": "year", "gte": 2022}]}, [2]),
        ({"and": [{"key": "class", "eq": "Sports"}, {"not": {"key": "tags", "eq": "b"}}]}, [5]),
        (
            {"and": [{"not": {"key": "class", "eq": "Sports"}}, {"key": "year", "exists": False}]},
            [4],
        ),
        ({"or": [{"key": "class", "eq": "Sports"}, {"key": "year", "gte": 2024}]}, [1, 2, 5]),
        ({"not": {"or": [{"key": "class", "exists": True}, {"key": "year", "exists": True}]}}, [4]),
    ],
)
def test_filters_match_what_their_semantics_say(
    store: Store, value: object, expected: list[int]
) -> None:
    assert matching(store, value) == expected


def test_the_metadata_index_follows_upserts_and_deletes(store: Store) -> None:
    business = {"key": "class", "eq": "Business"}
    store.delete(["0"])
    assert matching(store, business) == [2]
    store.upsert([Document("2", "text", np.ones(4, np.float32), {"class": "Other"})])
    assert matching(store, business) == []
    assert matching(store, {"key": "class", "eq": "Other"}) == [len(METADATA)]  # a new row
    rows = sqlite3.connect(store.path).execute(
        "SELECT COUNT(*) FROM metadata_values WHERE row_id IN (1, 3)"
    )
    assert rows.fetchone()[0] == 0  # the old rows' values went with them


def test_each_condition_is_a_search_of_the_metadata_index(store: Store) -> None:
    plans = {
        "eq": {"key": "class", "eq": "Business"},
        "in": {"key": "class", "in": ["Business", "Sports"]},
        "range": {"key": "year", "gte": 2020, "lt": 2024},
        "open range": {"key": "year", "gt": 2020},
        "string range": {"key": "year", "lt": "3"},
        "exists": {"key": "year", "exists": True},
        "and not": {"and": [{"key": "class", "eq": "Sports"}, {"not": {"key": "ok", "eq": True}}]},
        "or": {"or": [{"key": "class", "eq": "Sports"}, {"key": "year", "gte": 2024}]},
    }
    for name, value in plans.items():
        steps = store.filter_plan(parse_filter(value))
        searches = [step for step in steps if step.startswith(("SEARCH", "SCAN"))]
        assert searches, (name, steps)
        for step in searches:
            assert step.startswith("SEARCH metadata_values USING PRIMARY KEY (key=?"), (name, steps)
    # Only a negation on its own lists every row, from one of the narrow indexes that hold the
    # row ids (on doc_id, or doc_names), never from the rows themselves.
    steps = store.filter_plan(parse_filter({"not": {"key": "class", "eq": "Sports"}}))
    scans = [step for step in steps if step.startswith("SCAN")]
    narrow = {
        f"SCAN documents USING COVERING INDEX {name}"
        for name in ("sqlite_autoindex_documents_1", "doc_names")
    }
    assert len(scans) == 1 and scans[0] in narrow, steps


def test_a_store_made_before_the_metadata_index_gets_one_at_open(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    store = Store(path, dim=4)
    vector = np.ones(4, dtype=np.float32)
    store.upsert([Document(str(i), "text", vector, meta) for i, meta in enumerate(METADATA)])
    store.close()
    with sqlite3.connect(path) as old:  # what a store made before this version lacks
        old.execute("DROP TABLE metadata_values")
    reopened = Store(path, dim=4)
    assert matching(reopened, {"key": "class", "eq": "Business"}) == [0, 2]
    assert matching(reopened, {"key": "tags", "eq": "b"}) == [0, 1]
    reopened.upsert([Document("new", "text", vector, {"class": "Business"})])
    assert matching(reopened, {"key": "class", "eq": "Business"}) == [0, 2, len(METADATA)]


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        (10**22, True),
        (1e22, True),
        (-(10**22), True),
        (10**22 + 1, False),  # an integer JSON carries exactly, one past the schema's maximum
        (-(10**22) - 1, False),
        (math.nextafter(1e22, math.inf), False),
        (10**400, False),  # beyond any float: refused, not an overflow
    ],
)
def test_numbers_are_bounded_exactly_as_the_schema_says(value: float, accepted: bool) -> None:
    """The parser and ``json_schemas``'s ``minimum`` / ``maximum`` agree on every number."""
    schema = json_schemas("#/")["MetadataFilter"]["oneOf"][3]["properties"]["lte"]
    in_schema = schema["minimum"] <= value <= schema["maximum"]
    assert in_schema == accepted
    if accepted:
        parse_filter({"key": "a", "lte": value})
    else:
        with pytest.raises(FilterError, match="at most 1e22 in magnitude"):
            parse_filter({"key": "a", "lte": value})
