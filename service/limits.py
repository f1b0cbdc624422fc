"""Input checks that depend on the settings: how many texts, how long, and what they hold.

Bad input never reaches the model: an empty or blank text, too many texts, too long a text, or a
string that is not valid Unicode (a lone surrogate, which JSON allows) is refused here with a
message that names the item and the limit.
"""

from __future__ import annotations

from collections.abc import Sequence

from service.errors import InvalidRequest

MAX_ID_CHARS = 256
MAX_LOOKUP_IDS = 1000
"""Ids per ``POST /documents/lookup``: one SQLite query each, a body of at most ~256 KB."""


def _check_unicode(text: str, param: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest(
            f"{param} is not valid Unicode (it holds a lone surrogate)", param
        ) from None


def check_texts(
    texts: Sequence[str],
    max_texts: int,
    max_chars: int,
    param: str,
    item_params: Sequence[str] | None = None,
) -> None:
    """Raise :class:`InvalidRequest` unless 1..``max_texts`` non-blank texts of at most
    ``max_chars`` characters each are given.

    A problem with the whole list names ``param``; one with a text names its entry of
    ``item_params`` (default ``{param}.{position}``).
    """
    if not texts:
        raise InvalidRequest(f"{param} is empty: give at least one text", param)
    if len(texts) > max_texts:
        raise InvalidRequest(
            f"{param} has {len(texts)} items; the limit is {max_texts} per request", param
        )
    if item_params is None:
        item_params = [f"{param}.{position}" for position in range(len(texts))]
    for text, where in zip(texts, item_params, strict=True):
        if not text.strip():
            raise InvalidRequest(f"{where} is empty or only whitespace", where)
        if len(text) > max_chars:
            raise InvalidRequest(
                f"{where} has {len(text)} characters; the limit is {max_chars}", where
            )
        _check_unicode(text, where)


def check_document_id(doc_id: str, param: str) -> None:
    """Raise :class:`InvalidRequest` unless ``doc_id`` is a usable document id."""
    if not doc_id.strip():
        raise InvalidRequest(f"{param} is empty or only whitespace", param)
    if len(doc_id) > MAX_ID_CHARS:
        raise InvalidRequest(
            f"{param} has {len(doc_id)} characters; the limit is {MAX_ID_CHARS}", param
        )
    _check_unicode(doc_id, param)


def check_document_ids(doc_ids: Sequence[str], param: str) -> None:
    """Raise :class:`InvalidRequest` unless 1..``MAX_LOOKUP_IDS`` usable document ids are given."""
    if not doc_ids:
        raise InvalidRequest(f"{param} is empty: give at least one id", param)
    if len(doc_ids) > MAX_LOOKUP_IDS:
        raise InvalidRequest(
            f"{param} has {len(doc_ids)} items; the limit is {MAX_LOOKUP_IDS} per request", param
        )
    for position, doc_id in enumerate(doc_ids):
        check_document_id(doc_id, f"{param}.{position}")
