"""Each stored document's checksum: a byte flipped on disk inside a text, its metadata or its
vector is reported with the document's id by every read, by ``Store.verify``, by the ``full``
check at open and by ``fractal check``, and is never served; re-upserting the document heals it.
The bytes are flipped in the SQLite file itself, where SQLite's own checks cannot see them."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from index.backend import RowCorrupt
from index.embedded import Collection
from index.embedded.row_checksum import contents_digest, vector_digest
from index.embedded.store import Store, StoreCorrupt
from index.integrity import check_index_dir
from index.types import Document
from training.cli import main as fractal

DIM = 8
MARKER = "the lighthouse keeper's logbook"


def _documents(count: int = 40) -> list[Document]:
    rng = np.random.default_rng(7)
    documents = [
        Document(f"d{i}", f"plain text {i}", rng.standard_normal(DIM).astype(np.float32), {"i": i})
        for i in range(count)
    ]
    vector = np.full(DIM, 1234.5678, np.float32)  # its bytes are easy to find in the file
    documents.append(Document("marked", MARKER, vector, {"shelf": "upper"}))
    return documents


def _store_with_documents(path: Path) -> None:
    store = Store(path, DIM)
    store.upsert(_documents())
    store.close()  # the last connection checkpoints the WAL: every page is in the file


def _flip(path: Path, needle: bytes, offset: int = 0, mask: int = 0x20) -> None:
    """Change one byte of the only place ``needle`` occurs in the file (``mask`` 0x20 keeps an
    ASCII letter a letter, so the text still decodes)."""
    payload = bytearray(path.read_bytes())
    at = payload.find(needle)
    assert at >= 0 and payload.find(needle, at + 1) < 0
    payload[at + offset] ^= mask
    path.write_bytes(bytes(payload))


@pytest.fixture
def path(tmp_path: Path) -> Path:
    target = tmp_path / "store.sqlite3"
    _store_with_documents(target)
    return target


def test_a_sound_store_verifies_and_serves_every_row(path: Path) -> None:
    store = Store(path, DIM, check="full")
    assert list(store.verify()) == []
    document = store.get("marked")
    assert document is not None and document.text == MARKER
    store.close()


def test_a_flipped_byte_in_a_text_is_reported_with_its_id_and_never_served(path: Path) -> None:
    _flip(path, MARKER.encode(), offset=4)  # "lighthouse" → "Lighthouse"
    store = Store(path, DIM)  # SQLite's page check cannot see it
    with pytest.raises(RowCorrupt, match="'marked'.*text or metadata") as raised:
        store.get("marked")
    assert raised.value.doc_id == "marked"
    with pytest.raises(RowCorrupt, match="'marked'"):
        store.contents_of(["d1", "marked"])
    marked_row = store.live_row_ids()[-1]
    with pytest.raises(RowCorrupt, match="'marked'"):
        store.named([int(marked_row)], contents=True)
    assert store.named([int(marked_row)]) == [("marked", None)]  # the id alone is not at stake
    problems = list(store.verify())
    assert [problem.doc_id for problem in problems] == ["marked"]
    assert store.get("d1") is not None  # every other row is served
    store.close()
    with pytest.raises(StoreCorrupt, match="'marked'"):
        Store(path, DIM, check="full")


def test_a_flipped_byte_in_the_metadata_is_reported(path: Path) -> None:
    _flip(path, b'"shelf": "upper"', offset=10)
    store = Store(path, DIM)
    with pytest.raises(RowCorrupt, match="'marked'"):
        store.get("marked")
    store.close()


def test_a_flipped_bit_in_a_vector_is_reported_by_every_vector_read(path: Path) -> None:
    _flip(path, np.full(DIM, 1234.5678, "<f4").tobytes(), offset=5, mask=0x01)
    store = Store(path, DIM)
    with pytest.raises(RowCorrupt, match="'marked'.*vector"):
        store.get("marked")
    rows = store.live_row_ids()
    with pytest.raises(RowCorrupt, match="'marked'"):
        store.vectors_of(rows[-2:])
    store.vectors_of(rows[:-1])  # the others read fine
    with pytest.raises(RowCorrupt, match="'marked'"):
        list(store.iter_vectors(16))  # so no index is built from it
    assert [problem.doc_id for problem in store.verify()] == ["marked"]
    assert store.contents_of(["marked"])[0] is not None  # the text is sound and served
    store.close()


def test_upserting_the_document_again_or_deleting_it_heals_the_store(path: Path) -> None:
    _flip(path, MARKER.encode(), offset=4)
    store = Store(path, DIM)
    store.upsert([Document("marked", MARKER, np.ones(DIM, np.float32), {})])
    assert list(store.verify()) == []
    healed = store.get("marked")
    assert healed is not None and healed.text == MARKER
    store.delete(["marked"])
    assert list(store.verify()) == [] and store.get("marked") is None
    store.close()


def test_a_store_made_before_checksums_gets_them_at_open(path: Path) -> None:
    with closing(sqlite3.connect(path)) as db:
        db.execute("ALTER TABLE documents DROP COLUMN checksum")
    store = Store(path, DIM)
    assert list(store.verify()) == []
    assert store.count() == 41
    store.close()
    _flip(path, MARKER.encode(), offset=4)
    with closing(Store(path, DIM)) as reopened:
        assert [problem.doc_id for problem in reopened.verify()] == ["marked"]


def test_a_row_without_a_checksum_is_not_served(path: Path) -> None:
    with closing(sqlite3.connect(path)) as db:
        db.execute("UPDATE documents SET checksum = NULL WHERE doc_id = 'd3'")
        db.commit()
    with closing(Store(path, DIM)) as store:
        with pytest.raises(RowCorrupt, match="'d3'.*no valid checksum"):
            store.get("d3")


def test_check_index_dir_and_fractal_check_name_the_damaged_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index_dir = tmp_path / "index"
    index_dir.mkdir()
    _store_with_documents(index_dir / "store.sqlite3")
    named = index_dir / "collections" / "news"
    named.mkdir(parents=True)
    (named / "collection.json").write_text('{"name": "news", "index_kinds": ["exact"]}')
    _store_with_documents(named / "store.sqlite3")

    assert [(r.collection, r.documents, r.sound) for r in check_index_dir(index_dir)] == [
        ("default", 41, True),
        ("news", 41, True),
    ]
    assert fractal(["check", str(index_dir), "--no-progress"]) == 0
    assert "news: 41 documents, sound" in capsys.readouterr().out

    _flip(named / "store.sqlite3", MARKER.encode(), offset=4)
    results = check_index_dir(index_dir)
    assert [r.sound for r in results] == [True, False]
    assert len(results[1].row_problems) == 1 and "'marked'" in results[1].row_problems[0]
    assert fractal(["check", str(index_dir), "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "news: 41 documents, 1 problem(s)" in out and "'marked' (row" in out


def test_fractal_check_refuses_a_folder_with_no_collection(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert fractal(["check", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "holds no collection" in err[0]
    assert fractal(["check", str(tmp_path / "missing"), "--no-progress"]) == 2


def test_a_collection_rebuilds_its_files_without_a_damaged_vector_and_says_so(
    tmp_path: Path,
) -> None:
    documents = _documents()
    folder = tmp_path / "collection"
    vectors = np.stack([document.vector for document in documents])
    with Collection(folder, DIM, (4, DIM), ("exact", "hnsw")) as collection:
        collection.upsert(
            [d.id for d in documents],
            [d.text for d in documents],
            vectors,
            [d.metadata for d in documents],
        )
        collection.snapshot()
    _flip(folder / "store.sqlite3", np.full(DIM, 1234.5678, "<f4").tobytes(), 5, mask=0x01)
    (folder / "vectors.json").unlink()  # the full vectors' file is rebuilt from the store

    with Collection(folder, DIM, (4, DIM), ("exact", "hnsw")) as reopened:
        recovery = reopened.stats().recovery
        assert recovery.full_vectors["corrupt"] == ("marked",)
        assert any("'marked'" in line and "checksum" in line for line in recovery.repairs())
        with pytest.raises(RowCorrupt, match="'marked'"):
            reopened.get("marked")
        found = reopened.search(vectors[:1], 3, DIM, contents=True).hits[0]
        assert found[0].id == "d0" and "marked" not in [hit.id for hit in found]


def test_the_digests_stay_those_that_stores_on_disk_were_written_with() -> None:
    """Known answers: the checksum's layout (length-prefixed fields, BLAKE2b-64 with its
    personalisation) is part of every store on disk, so computing it faster must not change it."""
    assert contents_digest("a", "bé", "{}").hex() == "b66064d0c611d70e"
    assert vector_digest(b"1234").hex() == "a5d3931d27f79046"
    # The length in front of each field keeps a shifted boundary from hashing the same.
    assert contents_digest("ab", "c", "{}") != contents_digest("a", "bc", "{}")
