"""``fractal import``: shards into the service's collection, checked whole, one transaction per
shard; bad shards end with one ``error:`` line and leave the shards before them imported."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from bulk.shards import ShardHeader, shard_name, write_shard
from bundle import Manifest, load_bundle
from tests.bulk.helpers import (
    TEXTS,
    assert_one_error,
    run_cli,
    stored_documents,
    write_jsonl,
    write_raw_shard,
)
from tests.service.helpers import make_settings, serve

ROWS = 3


@pytest.fixture(scope="module")
def manifest(tiny_bundle_dir: Path) -> Manifest:
    return load_bundle(tiny_bundle_dir)


def _header(manifest: Manifest, start: int = 0, rows: int = ROWS, **changes) -> ShardHeader:
    values = dict(
        bundle_name=manifest.name,
        bundle_hash=manifest.content_hash,
        dim=manifest.dim,
        dtype="float32",
        start=start,
        rows=rows,
    )
    return ShardHeader(**(values | changes))


def _ids(number: int, rows: int = ROWS) -> list[str]:
    return [f"s{number}-{row}" for row in range(rows)]


def _good_shard(folder: Path, manifest: Manifest, number: int) -> Path:
    path = folder / shard_name(number)
    rng = np.random.default_rng(number)
    vectors = rng.standard_normal((ROWS, manifest.dim)).astype(np.float32)
    texts = [f"{TEXTS[row]} ({number})" for row in range(ROWS)]
    write_shard(path, _header(manifest, number * ROWS), _ids(number), texts, [{}] * ROWS, vectors)
    return path


def _import(capsys, shards: Path, bundle: Path, index_dir: Path):
    return run_cli(capsys, "import", shards, "--bundle", bundle, "--index-dir", index_dir)


def _vectors(manifest: Manifest, rows: int = ROWS) -> np.ndarray:
    return np.ones((rows, manifest.dim), np.float32)


def _nan(path: Path, manifest: Manifest) -> None:
    vectors = _vectors(manifest)
    vectors[2, 5] = np.nan
    write_shard(path, _header(manifest), _ids(1), TEXTS[:ROWS], [{}] * ROWS, vectors)


def _inf16(path: Path, manifest: Manifest) -> None:
    vectors = _vectors(manifest).astype(np.float16)
    vectors[1, 0] = np.inf
    header = _header(manifest, dtype="float16")
    write_shard(path, header, _ids(1), TEXTS[:ROWS], [{}] * ROWS, vectors)


def _duplicate_ids(path: Path, manifest: Manifest) -> None:
    ids = ["x", "y", "x"]
    write_shard(path, _header(manifest), ids, TEXTS[:ROWS], [{}] * ROWS, _vectors(manifest))


def _other_bundle(path: Path, manifest: Manifest) -> None:
    header = _header(manifest, bundle_name="other", bundle_hash="f" * 64)
    write_shard(path, header, _ids(1), TEXTS[:ROWS], [{}] * ROWS, _vectors(manifest))


def _other_dim(path: Path, manifest: Manifest) -> None:
    header = _header(manifest, dim=128)
    write_shard(path, header, _ids(1), TEXTS[:ROWS], [{}] * ROWS, np.ones((ROWS, 128), "f4"))


def _short_row(path: Path, manifest: Manifest) -> None:
    lists = [[1.0] * manifest.dim, [1.0] * manifest.dim, [1.0] * 128]
    columns = {
        "id": pa.array(_ids(1)),
        "text": pa.array(TEXTS[:ROWS]),
        "metadata": pa.array(["{}"] * ROWS),
        "vector": pa.array(lists, pa.list_(pa.float32())),
    }
    write_raw_shard(path, vars(_header(manifest)), columns)


def _missing_text(path: Path, manifest: Manifest) -> None:
    columns = {
        "id": pa.array(_ids(1)),
        "metadata": pa.array(["{}"] * ROWS),
        "vector": pa.array([[1.0] * manifest.dim] * ROWS, pa.list_(pa.float32(), manifest.dim)),
    }
    write_raw_shard(path, vars(_header(manifest)), columns)


def _truncated(path: Path, manifest: Manifest) -> None:
    _good_shard(path.parent, manifest, 1)
    path.write_bytes(path.read_bytes()[:-100])


def _empty(path: Path, manifest: Manifest) -> None:
    header = _header(manifest, rows=0)
    write_shard(path, header, [], [], [], np.ones((0, manifest.dim), np.float32))


def _bad_metadata(path: Path, manifest: Manifest) -> None:
    columns = {
        "id": pa.array(_ids(1)),
        "text": pa.array(TEXTS[:ROWS]),
        "metadata": pa.array(["{}", "[1]", "{}"]),
        "vector": pa.array([[1.0] * manifest.dim] * ROWS, pa.list_(pa.float32(), manifest.dim)),
    }
    write_raw_shard(path, vars(_header(manifest)), columns)


BAD_SHARDS: list[tuple[Callable[[Path, Manifest], None], list[str]]] = [
    (_nan, ["row 3", "NaN or inf"]),
    (_inf16, ["row 2", "NaN or inf"]),
    (_duplicate_ids, ["row 3", "id 'x' repeats row 1"]),
    (_other_bundle, ["made with bundle 'other' (ffffffffffff), not with 'tiny'"]),
    (_other_dim, ["128-d vectors, the bundle's are 384-d"]),
    (_short_row, ["row 3", "the vector has 128 values, the bundle's dim is 384"]),
    (_missing_text, ["missing column(s) text"]),
    (_truncated, ["not a readable Parquet file, truncated or corrupt"]),
    (_empty, ["the shard is empty"]),
    (_bad_metadata, ["row 2", "the metadata is not a JSON object"]),
]


@pytest.mark.parametrize(
    ("make", "fragments"), BAD_SHARDS, ids=lambda v: getattr(v, "__name__", "")
)
def test_a_bad_shard_stops_the_import_with_one_error_and_nothing_of_it_imported(
    capsys: pytest.CaptureFixture[str],
    tiny_bundle_dir: Path,
    manifest: Manifest,
    tmp_path: Path,
    make: Callable[[Path, Manifest], None],
    fragments: list[str],
) -> None:
    shards = tmp_path / "shards"
    shards.mkdir()
    _good_shard(shards, manifest, 0)
    bad = shards / shard_name(1)
    make(bad, manifest)
    _good_shard(shards, manifest, 2)
    index_dir = tmp_path / "index"

    status, out, err = _import(capsys, shards, tiny_bundle_dir, index_dir)
    assert_one_error(status, err, str(bad), *fragments)
    assert f"{shards / shard_name(0)}: imported 3 documents" in out
    stored = stored_documents(index_dir)
    assert set(stored) == set(_ids(0))
    # The shards before the bad one were snapshotted: the service starts without a rebuild.
    with serve(make_settings(tiny_bundle_dir, index_dir, index_kinds="exact")) as client:
        assert client.get("/info").json()["recovery"]["rebuilt"] == {}


def test_import_then_serve_finds_the_documents_with_the_vectors_post_documents_stores(
    capsys: pytest.CaptureFixture[str], tiny_bundle_dir: Path, tmp_path: Path
) -> None:
    rows = [{"id": f"doc-{i}", "text": t, "lang": "en"} for i, t in enumerate(TEXTS)]
    corpus = write_jsonl(tmp_path / "c.jsonl", rows)
    shards, index_dir = tmp_path / "shards", tmp_path / "index"
    status, _, err = run_cli(
        capsys,
        "embed",
        corpus,
        "--bundle",
        tiny_bundle_dir,
        "--out",
        shards,
        "--shard-size",
        4,
        "--workers",
        1,
        "--no-progress",
    )
    assert status == 0, err
    status, out, err = _import(capsys, shards, tiny_bundle_dir, index_dir)
    assert status == 0, err
    assert "imported 10 documents from 3 shards" in out

    with serve(make_settings(tiny_bundle_dir, index_dir)) as client:
        info = client.get("/info").json()
        assert info["documents"] == len(TEXTS)
        # The import's snapshot is used as it is: nothing rebuilt, nothing to catch up.
        assert info["recovery"]["rebuilt"] == {} and info["recovery"]["caught_up_changes"] == 0
        assert client.get("/documents/doc-3").json() == {
            "id": "doc-3",
            "text": TEXTS[3],
            "metadata": {"lang": "en"},
        }
        for index in ("exact", "hnsw"):
            response = client.post(
                "/search",
                json={"queries": TEXTS, "k": 1, "granularity": "fine", "index": index},
            )
            assert response.status_code == 200, response.text
            top = [result["hits"][0]["id"] for result in response.json()["results"]]
            assert top == [row["id"] for row in rows]
        posted = [{"id": f"posted-{i}", "text": t} for i, t in enumerate(TEXTS)]
        assert client.post("/documents", json={"documents": posted}).status_code == 200

    stored = stored_documents(index_dir)
    for i in range(len(TEXTS)):
        imported, encoded = stored[f"doc-{i}"][1], stored[f"posted-{i}"][1]
        np.testing.assert_allclose(imported, encoded, rtol=1e-3, atol=1e-3)  # float16 shards


def test_a_missing_folder_or_an_index_of_another_bundle_ends_with_one_error(
    capsys: pytest.CaptureFixture[str], tiny_bundle_dir: Path, manifest: Manifest, tmp_path: Path
) -> None:
    status, _, err = _import(capsys, tmp_path / "nothing", tiny_bundle_dir, tmp_path / "index")
    assert_one_error(status, err, "nothing", "no such shard file or folder")
    (tmp_path / "empty").mkdir()
    status, _, err = _import(capsys, tmp_path / "empty", tiny_bundle_dir, tmp_path / "index")
    assert_one_error(status, err, "no shards (*.parquet) to import")

    shards = tmp_path / "shards"
    shards.mkdir()
    _good_shard(shards, manifest, 0)
    index_dir = tmp_path / "index"
    index_dir.mkdir(exist_ok=True)
    (index_dir / "bundle.json").write_text('{"name": "other", "bundle_hash": "abc", "dim": 8}')
    status, _, err = _import(capsys, shards, tiny_bundle_dir, index_dir)
    assert_one_error(status, err, "holds vectors of bundle 'other'")
