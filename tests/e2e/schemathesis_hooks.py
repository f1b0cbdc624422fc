"""Schemathesis hooks for the contract test (``SCHEMATHESIS_HOOKS`` names this file).

The schema states every rule on a single field; a few rules join fields, which JSON Schema (and
OpenAPI query parameters) cannot state, and the fields' descriptions say them instead. A
schema-valid request that breaks one of those is rightly a 422, so a "schema-valid request
rejected" failure (ST202) is dropped when, and only when, the 422's message is one of these
rules. Every other failure stands.
"""

from __future__ import annotations

from typing import Any

import schemathesis

from index.filters import MAX_CONDITIONS, MAX_DEPTH, MAX_VALUES

SCHEMA_VALID_REJECTED = "ST202"
RULES_BETWEEN_FIELDS = (
    "give dims or granularity, not both",  # POST /embed
    "shortlist_dim applies to rerank=c2f",  # /search
    "rerank 'c2f' answers at the fine dimension",  # /search: not with granularity=coarse
    "rerank 'c2f' re-ranks by cosine",  # /search: not with scoring=sfs
    "repeats an earlier id of this request",  # POST /documents, /documents/vectors
    "repeat the collection's name in the body",  # DELETE /collections/{name}: path = body
    # /search filter: limits over the whole filter, across its levels (the schema states each
    # level's own: 1-64 filters per and / or, 1-1,024 values per in)
    f"filters nest at most {MAX_DEPTH} levels deep",
    f"a filter holds at most {MAX_CONDITIONS} conditions",
    f"hold at most {MAX_VALUES} values in all",
)


def breaks_a_rule_between_fields(status: int, body: Any) -> bool:
    """Whether an answer is the 422 of one of :data:`RULES_BETWEEN_FIELDS`."""
    if status != 422 or not isinstance(body, dict):
        return False
    message = body.get("error", {}).get("message", "")
    return any(rule in message for rule in RULES_BETWEEN_FIELDS)


@schemathesis.hook
def filter_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:
    """Keep every failure but ST202 for a rule between fields (see the module docstring)."""
    if failure.code != SCHEMA_VALID_REJECTED:
        return True
    try:
        body = response.json()
    except ValueError:
        return True
    return not breaks_a_rule_between_fields(response.status_code, body)
