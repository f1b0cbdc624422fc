"""Each stored document's checksum: it is written with the row and checked whenever the row is read,
so bytes that changed on disk are reported, never served as if they were true.

SQLite checks the structure of its pages (:data:`index.embedded.store.STORE_CHECKS`) but keeps no
checksum of the values inside them, so without one a flipped byte in a text or a vector would be
read back as data. The checksum is two BLAKE2b digests of 8 bytes each, 16 bytes in all:

- the **contents** digest covers the document's id, its text and its metadata (the stored JSON);
- the **vector** digest covers the stored full vector's bytes.

Reads that need only one part (a search's hits read texts and metadata, a re-rank or an index build
reads vectors) check that part alone, without reading the other. Each field is hashed with its
length in front of it, so no two different rows hash the same bytes.
"""

from __future__ import annotations

import hashlib
import struct

from index.backend import RowCorrupt

DIGEST_BYTES = 8
CHECKSUM_BYTES = 2 * DIGEST_BYTES
_CONTENTS = hashlib.blake2b(digest_size=DIGEST_BYTES, person=b"fractal-doc")
_VECTOR = hashlib.blake2b(digest_size=DIGEST_BYTES, person=b"fractal-vec")
"""Empty hashers copied for each digest: a copy costs less than making one with its
parameters, and every read of a search's hits makes one."""
_LENGTH = struct.Struct("<Q").pack


def _encoded(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def contents_digest(doc_id: str, text: str, metadata_json: str) -> bytes:
    """The digest of a document's id, text and stored metadata JSON."""
    name, body, metadata = _encoded(doc_id), _encoded(text), _encoded(metadata_json)
    digest = _CONTENTS.copy()
    digest.update(
        b"".join(
            (_LENGTH(len(name)), name, _LENGTH(len(body)), body, _LENGTH(len(metadata)), metadata)
        )
    )
    return digest.digest()


def vector_digest(vector: bytes) -> bytes:
    """The digest of a document's stored full-vector bytes."""
    digest = _VECTOR.copy()
    digest.update(vector)
    return digest.digest()


def row_checksum(doc_id: str, text: str, metadata_json: str, vector: bytes) -> bytes:
    """The checksum written with a row: its contents digest, then its vector digest."""
    return contents_digest(doc_id, text, metadata_json) + vector_digest(vector)


def check_contents(
    row: int, doc_id: str, text: str, metadata_json: str, checksum: bytes | None
) -> None:
    """:class:`RowCorrupt` unless the id, text and metadata match the row's checksum."""
    if checksum is None or len(checksum) != CHECKSUM_BYTES:
        raise RowCorrupt(doc_id, row, "it has no valid checksum")
    if contents_digest(doc_id, text, metadata_json) != checksum[:DIGEST_BYTES]:
        raise RowCorrupt(doc_id, row, "its id, text or metadata changed")


def check_vector(row: int, doc_id: str, vector: bytes, checksum: bytes | None) -> None:
    """:class:`RowCorrupt` unless the vector bytes match the row's checksum."""
    if checksum is None or len(checksum) != CHECKSUM_BYTES:
        raise RowCorrupt(doc_id, row, "it has no valid checksum")
    if vector_digest(vector) != checksum[DIGEST_BYTES:]:
        raise RowCorrupt(doc_id, row, "its vector changed")
