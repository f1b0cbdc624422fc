"""The argument checks both index backends share: a positive count, an index layout, and an
upsert's documents."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from index.faiss_indexes import KINDS
from index.types import Document
from index.vectors import as_matrix


def check_layout(
    layout: Mapping[int, Sequence[str]], prefix_dims: Sequence[int]
) -> dict[int, tuple[str, ...]]:
    """``layout`` in canonical form (dims ascending, kinds in :data:`KINDS` order), or
    :class:`ValueError` for a dim that is not served or a kind that does not exist."""
    checked: dict[int, tuple[str, ...]] = {}
    for prefix_dim, kinds in sorted(layout.items()):
        if prefix_dim not in prefix_dims:
            raise ValueError(
                f"the index layout names dim {prefix_dim}, which is not a served prefix "
                f"({', '.join(map(str, prefix_dims))})"
            )
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown or len(set(kinds)) != len(kinds):
            raise ValueError(
                f"the index layout at dim {prefix_dim} must list some of {', '.join(KINDS)}, "
                f"each once; got {list(kinds)}"
            )
        checked[prefix_dim] = tuple(kind for kind in KINDS if kind in kinds)
    return checked


MAX_ID_BYTES = 65_535
"""The longest document id, in bytes of UTF-8 (a collection keeps each row's id with a 16-bit
length: :mod:`index.embedded.row_names`)."""


def checked_documents(
    ids: Sequence[str],
    texts: Sequence[str],
    vectors: np.ndarray,
    metadata: Sequence[dict] | None,
    dim: int,
) -> tuple[list[Document], np.ndarray]:
    """An upsert's documents, checked (:class:`ValueError` otherwise), and their full vectors
    as one ``(n, dim)`` matrix (:func:`index.vectors.as_matrix`)."""
    if isinstance(ids, str) or isinstance(texts, str):
        raise ValueError("ids and texts must be sequences of strings, not a single string")
    matrix = as_matrix(vectors, (dim,), "vectors")
    metadata = [{} for _ in ids] if metadata is None else list(metadata)
    if not len(ids) == len(texts) == len(metadata) == matrix.shape[0]:
        raise ValueError(
            f"got {len(ids)} ids, {len(texts)} texts, {len(metadata)} metadata and "
            f"{matrix.shape[0]} vectors; they must all be the same length"
        )
    if len(set(ids)) != len(ids):
        raise ValueError("ids must be unique within one upsert")
    for doc_id in ids:  # a character takes at most 4 bytes: only a long id can be too long
        if isinstance(doc_id, str) and len(doc_id) * 4 > MAX_ID_BYTES:
            size = len(doc_id.encode("utf-8", "surrogatepass"))
            if size > MAX_ID_BYTES:
                raise ValueError(f"document ids must be at most {MAX_ID_BYTES} bytes, got {size}")
    documents = [
        Document(id=doc_id, text=text, vector=vector, metadata=meta)
        for doc_id, text, vector, meta in zip(ids, texts, matrix, metadata, strict=True)
    ]
    return documents, matrix


def check_count(value: object, what: str) -> int:
    """``value`` as an int, or :class:`ValueError` unless it is a positive integer."""
    if type(value) is int and value > 0:  # the common case, without the checks below
        return value
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return int(value)
