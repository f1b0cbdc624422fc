"""C2F at the bundle's shortlist prefix: the manifest's ``granularity.shortlist`` is indexed and
used by default, ``shortlist_dim`` overrides it per request, and what cannot be served is a 422
that says what can. The tiny bundle (384-d, prefixes 64 … 384) with a shortlist of 128."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.settings import Settings
from tests.service.helpers import add_documents, make_settings, serve
from tests.tiny_bundle import build_tiny_bundle

TEXTS = [f"document number {i} about topic {i % 7} and colour {i % 5}" for i in range(120)]
QUERIES = ["topic 3 and colour 2", "document 17", "colour 4 about nothing", "number 99 topic 1"]
K = 5
FACTOR = 2
SHORTLIST = 128
FINE = 384


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tiny-shortlist")
    build_tiny_bundle(directory, shortlist_dim=SHORTLIST)
    return directory


@pytest.fixture(scope="module")
def client(bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_settings(
        bundle_dir, tmp_path_factory.mktemp("index"), index_kinds="exact", c2f_factor=FACTOR
    )
    with serve(settings) as client:
        add_documents(client, TEXTS)
        yield client


@pytest.fixture(scope="module")
def vectors(client: TestClient) -> tuple[np.ndarray, np.ndarray]:
    """Raw full vectors of the documents and the queries, as /embed returns them."""

    def embed(texts: list[str]) -> np.ndarray:
        body = client.post("/embed", json={"texts": texts, "normalize": False}).json()
        return np.array([item["embeddings"][0]["vector"] for item in body["data"]])

    return embed(TEXTS), embed(QUERIES)


def _cosines(queries: np.ndarray, documents: np.ndarray, dim: int) -> np.ndarray:
    def unit(matrix: np.ndarray) -> np.ndarray:
        return matrix[:, :dim] / np.linalg.norm(matrix[:, :dim], axis=1, keepdims=True)

    return unit(queries) @ unit(documents).T


def _search(client: TestClient, **options: object) -> list[dict]:
    response = client.post("/search", json={"queries": QUERIES, "k": K, **options})
    assert response.status_code == 200, response.text
    return response.json()["results"]


def _check_c2f(results: list[dict], vectors: tuple, shortlist_dim: int) -> None:
    """Each query's hits are its shortlist's best by full cosine: the shortlist is the top
    k × factor at ``shortlist_dim``, and the route names that prefix."""
    documents, queries = vectors
    prefix, full = _cosines(queries, documents, shortlist_dim), _cosines(queries, documents, FINE)
    for result, prefix_row, full_row in zip(results, prefix, full, strict=True):
        route = result["route"]
        assert (route["rerank"], route["dimension"]) == ("c2f", FINE)
        assert (route["shortlist_dimension"], route["shortlist_k"]) == (shortlist_dim, K * FACTOR)
        shortlist = np.argsort(-prefix_row, kind="stable")[: K * FACTOR]
        expected = shortlist[np.argsort(-full_row[shortlist], kind="stable")][:K]
        got = [hit["metadata"]["position"] for hit in result["hits"]]
        assert got == expected.tolist()
        np.testing.assert_allclose(
            [hit["score"] for hit in result["hits"]], full_row[expected], atol=1e-5
        )


def test_info_shows_the_shortlist_prefix_and_its_index(client: TestClient) -> None:
    info = client.get("/info").json()
    resolutions = info["resolutions"]
    assert resolutions["granularity"] == {"coarse": 64, "fine": FINE, "shortlist": SHORTLIST}
    assert resolutions["shortlist_dim"] == SHORTLIST
    assert resolutions["indexed_dims"] == [64, SHORTLIST, FINE]
    assert {(index["dimension"], index["kind"]) for index in info["indexes"]} == {
        (64, "exact"),
        (SHORTLIST, "exact"),
        (FINE, "exact"),
    }


def test_c2f_shortlists_at_the_manifest_prefix(client: TestClient, vectors: tuple) -> None:
    _check_c2f(_search(client, rerank="c2f"), vectors, SHORTLIST)
    single = client.get("/search", params={"q": QUERIES[0], "k": K, "rerank": "c2f"}).json()
    assert single["route"]["shortlist_dimension"] == SHORTLIST


@pytest.mark.parametrize("shortlist_dim", [64, SHORTLIST, FINE])
def test_shortlist_dim_overrides_it_per_request(
    client: TestClient, vectors: tuple, shortlist_dim: int
) -> None:
    _check_c2f(_search(client, rerank="c2f", shortlist_dim=shortlist_dim), vectors, shortlist_dim)
    params = {"q": QUERIES[1], "k": K, "rerank": "c2f", "shortlist_dim": shortlist_dim}
    single = client.get("/search", params=params).json()
    assert single["route"]["shortlist_dimension"] == shortlist_dim


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        (
            {"rerank": "c2f", "shortlist_dim": 100},
            "shortlist_dim 100 is not a trained prefix; allowed: 64, 128, 192, 256, 384",
        ),
        ({"rerank": "c2f", "shortlist_dim": 0}, "allowed: 64, 128, 192, 256, 384"),
        (
            {"rerank": "c2f", "shortlist_dim": 192},
            "shortlist_dim 192 has no index to shortlist from; the indexed prefixes are "
            "64, 128, 384",
        ),
        ({"shortlist_dim": 128}, "shortlist_dim applies to rerank=c2f"),
        ({"shortlist_dim": 128, "granularity": "coarse"}, "shortlist_dim applies to rerank=c2f"),
        ({"rerank": "c2f", "shortlist_dim": "wide"}, "shortlist_dim: Input should be a valid"),
    ],
)
def test_shortlists_that_cannot_be_served_are_422(
    client: TestClient, params: dict, needle: str
) -> None:
    response = client.get("/search", params={"q": "topic 3", **params})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["type"] == "invalid_request" and needle in error["message"], error
    assert error["param"] == "shortlist_dim"


def test_fine_through_c2f_uses_the_shortlist_prefix(
    bundle_dir: Path, tmp_path: Path, vectors: tuple
) -> None:
    """Without an index at the fine prefix, fine queries take C2F at the shortlist prefix, whose
    index the layout builds; ``shortlist_dim`` applies to them too."""
    settings = make_settings(
        bundle_dir,
        tmp_path / "index",
        index_kinds="exact",
        fine_index_kinds="none",
        c2f_factor=FACTOR,
    )
    with serve(settings) as client:
        add_documents(client, TEXTS)
        indexes = {(i["dimension"], i["kind"]) for i in client.get("/info").json()["indexes"]}
        assert indexes == {(64, "exact"), (SHORTLIST, "exact")}
        _check_c2f(_search(client, granularity="fine"), vectors, SHORTLIST)
        _check_c2f(_search(client, granularity="fine", shortlist_dim=64), vectors, 64)


@pytest.mark.parametrize(
    ("coarse", "fine", "shortlist", "fine_kinds", "layout"),
    [
        (64, 384, None, None, {64: ("hnsw", "exact"), 384: ("hnsw", "exact")}),
        (64, 384, 128, "none", {64: ("hnsw", "exact"), 128: ("hnsw", "exact"), 384: ()}),
        (64, 384, 64, "pq", {64: ("hnsw", "exact"), 384: ("pq",)}),
        (64, 384, 384, "none", {64: ("hnsw", "exact"), 384: ("hnsw", "exact")}),
        (384, 384, 384, "pq", {384: ("hnsw", "exact", "pq")}),
    ],
)
def test_index_layout_builds_the_shortlist_prefix(
    tmp_path: Path,
    coarse: int,
    fine: int,
    shortlist: int | None,
    fine_kinds: str | None,
    layout: dict,
) -> None:
    settings = Settings(bundle_dir=tmp_path, index_dir=tmp_path, fine_index_kinds=fine_kinds)
    assert settings.index_layout(coarse, fine, shortlist) == layout
