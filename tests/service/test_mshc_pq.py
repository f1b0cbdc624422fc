"""An MSHC bundle served over HTTP: the 96-d PQ index is built from the bundle's codebooks
(8 bytes per vector), C2F re-ranks its shortlist exactly at 384-d, and /info and /metrics say how
many bytes each index spends per vector."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from bundle import load_bundle, write_manifest
from service.errors import StartupError
from service.startup import load_runtime
from tests.service.bundles import clinc, mshc_bundle
from tests.service.helpers import add_documents, make_settings, serve

NUM_DOCUMENTS = 300
NUM_QUERIES = 20


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return mshc_bundle(tmp_path_factory)


@pytest.fixture(scope="module")
def client(bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_settings(
        bundle_dir, tmp_path_factory.mktemp("mshc-index"), index_kinds="pq,exact", max_k=100
    )
    with serve(settings) as client:
        client.ids = add_documents(client, list(clinc().train.texts[:NUM_DOCUMENTS]))  # type: ignore[attr-defined]
        yield client


def _embed(client: TestClient, texts: list[str], dim: int) -> np.ndarray:
    vectors = []
    for start in range(0, len(texts), 100):
        body = client.post(
            "/embed", json={"texts": texts[start : start + 100], "dims": [dim], "normalize": True}
        ).json()
        vectors += [item["embeddings"][0]["vector"] for item in body["data"]]
    return np.array(vectors)


def _pq_reconstruction(vectors: np.ndarray, codebooks: np.ndarray) -> np.ndarray:
    """Each sub-vector replaced by its nearest sub-centroid, in numpy."""
    m, _, dsub = codebooks.shape
    parts = []
    for j in range(m):
        sub = vectors[:, j * dsub : (j + 1) * dsub]
        nearest = np.argmin(((sub[:, None, :] - codebooks[j][None]) ** 2).sum(-1), axis=1)
        parts.append(codebooks[j][nearest])
    return np.concatenate(parts, axis=1)


def test_manifest_describes_the_compression_parts(bundle_dir: Path) -> None:
    manifest = load_bundle(bundle_dir)
    assert manifest.objective == "mshc" and manifest.prefix_dims == (96, 192, 256, 384)
    assert manifest.compression.to_json()["pq"] == {
        "file": "pq_codebooks.npy",
        "dim": 96,
        "m": 8,
        "nbits": 8,
        "shape": [8, 256, 12],
        "bytes_per_vector": 8,
    }
    assert manifest.compression.sae.output_dim == 32
    assert {"pq_codebooks.npy", "sae.onnx", "encoder.onnx"} <= set(manifest.files)


def test_info_reports_bytes_per_vector_and_bundle_codebooks(client: TestClient) -> None:
    indexes = {(i["dimension"], i["kind"]): i for i in client.get("/info").json()["indexes"]}
    pq96 = indexes[(96, "pq")]
    assert pq96["bytes_per_vector"] == 8 and pq96["codebooks"] == "bundle"
    assert pq96["vectors"] == NUM_DOCUMENTS
    assert indexes[(96, "exact")]["bytes_per_vector"] == 4 * 96
    # The 384-d PQ index has no bundle codebooks and too few vectors to train its own yet.
    assert indexes[(384, "pq")]["codebooks"] == "trained"
    assert indexes[(384, "pq")]["bytes_per_vector"] == 4 * 384
    metrics = client.get("/metrics").text
    assert (
        'fractal_index_bytes_per_vector{collection="default",dimension="96",kind="pq",'
        'scoring="cosine"} 8.0' in metrics
    )


def test_pq_search_scores_with_the_bundle_codebooks(client: TestClient, bundle_dir: Path) -> None:
    codebooks = np.load(bundle_dir / "pq_codebooks.npy")
    documents = _embed(client, list(clinc().train.texts[:NUM_DOCUMENTS]), 96)
    queries = list(clinc().test.texts[:NUM_QUERIES])
    query_vectors = _embed(client, queries, 96)
    expected_scores = query_vectors @ _pq_reconstruction(documents, codebooks).T
    response = client.post(
        "/search", json={"queries": queries, "k": 5, "granularity": "coarse", "index": "pq"}
    )
    assert response.status_code == 200, response.text
    for result, row in zip(response.json()["results"], expected_scores, strict=True):
        assert result["route"]["index"] == "pq" and result["route"]["dimension"] == 96
        got = [client.ids.index(hit["id"]) for hit in result["hits"]]
        np.testing.assert_allclose([h["score"] for h in result["hits"]], row[got], atol=1e-4)
        np.testing.assert_allclose(row[got], np.sort(row)[::-1][:5], atol=1e-4)


def test_c2f_reranks_the_pq_shortlist_exactly_at_full_dimension(client: TestClient) -> None:
    queries = list(clinc().test.texts[:NUM_QUERIES])
    full_docs = _embed(client, list(clinc().train.texts[:NUM_DOCUMENTS]), 384)
    full_queries = _embed(client, queries, 384)
    response = client.post(
        "/search", json={"queries": queries, "k": 10, "index": "pq", "rerank": "c2f"}
    )
    assert response.status_code == 200, response.text
    for result, query in zip(response.json()["results"], full_queries, strict=True):
        route = result["route"]
        assert route["rerank"] == "c2f" and route["index"] == "pq"
        assert route["shortlist_dimension"] == 96 and route["dimension"] == 384
        got = [client.ids.index(hit["id"]) for hit in result["hits"]]
        exact = full_docs[got] @ query
        np.testing.assert_allclose([h["score"] for h in result["hits"]], exact, atol=1e-4)
        assert np.all(np.diff(exact) <= 1e-6)


def test_codebooks_that_disagree_with_the_manifest_are_refused(
    bundle_dir: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "bundle"
    shutil.copytree(bundle_dir, copy)
    np.save(copy / "pq_codebooks.npy", np.zeros((8, 256, 6), dtype=np.float32))
    write_manifest(copy, load_bundle(bundle_dir))  # re-hashed: only the shape is wrong
    settings = make_settings(copy, tmp_path / "index", index_kinds="pq")
    with pytest.raises(StartupError, match=r"holds float32 \[8, 256, 6\], the manifest says"):
        load_runtime(settings)
    # Without a PQ index the codebooks are not needed, and the bundle serves.
    load_runtime(make_settings(copy, tmp_path / "index2", index_kinds="exact")).collection.close()
