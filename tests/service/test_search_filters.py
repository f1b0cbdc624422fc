"""``/search`` with a metadata ``filter`` (GET: JSON text, POST: an object), on the tiny bundle:
every route returns the best matching documents (against numpy on the vectors ``/embed``
returns), through the exact subset and through the selector, says how it filtered, returns
``min(k, matches)`` hits, and a bad filter is a 422 naming the JSON path of the offending part."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from client import FractalClient
from index.embedded import FilterParams
from tests.service.helpers import make_settings, serve

NUM_DOCUMENTS = 240
CLASSES = ("Business", "Sports", "Tech")
WORDS = ("market", "match", "chip", "stock", "goal", "robot", "bank", "team", "code", "trade")
K = 10


def _metadata(position: int) -> dict:
    return {
        "class": CLASSES[position % 3],
        "year": 2000 + position % 24,
        "tags": ["even" if position % 2 == 0 else "odd", f"w{position % 5}"],
    }


@pytest.fixture(scope="module")
def texts() -> list[str]:
    rng = np.random.default_rng(3)
    return [" ".join(rng.choice(WORDS, size=6)) + f" {i}" for i in range(NUM_DOCUMENTS)]


@pytest.fixture(scope="module")
def client(
    tiny_bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory, texts: list[str], backend
) -> Iterator[TestClient]:
    settings = make_settings(
        tiny_bundle_dir,
        tmp_path_factory.mktemp("filter-index"),
        index_kinds="exact,hnsw",
        sfs=True,
        sfs_fragment_dim=32,
        max_k=NUM_DOCUMENTS,
        **backend(),
    )
    with serve(settings) as client:
        documents = [
            {"id": f"doc-{i}", "text": text, "metadata": _metadata(i)}
            for i, text in enumerate(texts)
        ]
        FractalClient(client).add_documents(documents, batch_size=100)
        yield client


@pytest.fixture(scope="module")
def vectors(client: TestClient, texts: list[str]) -> np.ndarray:
    rows = []
    for start in range(0, len(texts), 100):
        body = client.post("/embed", json={"texts": texts[start : start + 100]}).json()
        rows += [item["embeddings"][0]["vector"] for item in body["data"]]
    return np.array(rows, dtype=np.float64)


@pytest.fixture
def index_first(client: TestClient) -> Iterator[None]:
    """Send every filter through the index (the corpus is small enough for the policy to score
    every filter's documents exactly)."""
    collection = client.app.state.runtime.collection
    collection.filters = FilterParams(exact_subset_scale=0.0)
    yield
    collection.filters = FilterParams()


def _on_milvus(client: TestClient) -> bool:
    return client.app.state.runtime.settings.index_backend == "milvus"


def _unit(matrix: np.ndarray) -> np.ndarray:
    return matrix / np.linalg.norm(matrix, axis=-1, keepdims=True)


def _scores(query: np.ndarray, documents: np.ndarray, dim: int, scoring: str) -> np.ndarray:
    if scoring == "cosine":
        return _unit(documents[:, :dim]) @ _unit(query[:dim])
    fragments = dim // 32
    split_docs = _unit(documents[:, :dim].reshape(len(documents), fragments, 32))
    split_query = _unit(query[:dim].reshape(fragments, 32))
    return np.einsum("nfd,fd->n", split_docs, split_query) / fragments


FILTERS = {
    "eq": ({"key": "class", "eq": "Business"}, lambda m: m["class"] == "Business"),
    "range and tag": (
        {"and": [{"key": "year", "gte": 2010, "lt": 2016}, {"key": "tags", "eq": "even"}]},
        lambda m: 2010 <= m["year"] < 2016 and "even" in m["tags"],
    ),
    "or not": (
        {"or": [{"key": "class", "in": ["Tech"]}, {"not": {"key": "tags", "eq": "w1"}}]},
        lambda m: m["class"] == "Tech" or "w1" not in m["tags"],
    ),
}
ROUTES = {
    "coarse exact": ({"granularity": "coarse", "index": "exact"}, 64, "cosine"),
    "fine hnsw": ({"granularity": "fine", "index": "hnsw"}, 384, "cosine"),
    "c2f": ({"granularity": "fine", "rerank": "c2f", "index": "hnsw"}, 384, "cosine"),
    "sfs": ({"granularity": "fine", "scoring": "sfs", "index": "exact"}, 384, "sfs"),
}


@pytest.mark.parametrize("path", ["exact_subset", "index"])
@pytest.mark.parametrize("route_name", list(ROUTES))
@pytest.mark.parametrize("filter_name", list(FILTERS))
def test_filtered_routes_return_the_best_matching_documents(
    client: TestClient,
    vectors: np.ndarray,
    texts: list[str],
    request: pytest.FixtureRequest,
    path: str,
    route_name: str,
    filter_name: str,
) -> None:
    milvus = _on_milvus(client)
    if milvus and path == "index":
        pytest.skip("Milvus applies every filter inside its own search: one path, tested once")
    if path == "index":
        request.getfixturevalue("index_first")
    where, predicate = FILTERS[filter_name]
    options, dim, scoring = ROUTES[route_name]
    matching = [i for i in range(NUM_DOCUMENTS) if predicate(_metadata(i))]
    queries = [texts[5], texts[77], "market goal robot"]
    response = client.post("/search", json={"queries": queries, "k": K, "filter": where, **options})
    assert response.status_code == 200, response.text
    query_vectors = [vectors[5], vectors[77], None]
    index_path = "selector" if options["index"] == "hnsw" else "scan"
    for result, query_vector in zip(response.json()["results"], query_vectors, strict=True):
        if milvus:
            assert result["route"]["filter"]["mode"] == "milvus"
            assert result["route"]["filter"]["matching"] is None  # Milvus does not count them
        else:
            assert result["route"]["filter"]["mode"] == (index_path if path == "index" else path)
            assert result["route"]["filter"]["matching"] == len(matching)
        assert len(result["hits"]) == K
        got = [int(hit["id"].removeprefix("doc-")) for hit in result["hits"]]
        assert set(got) <= set(matching)
        assert all(predicate(hit["metadata"]) for hit in result["hits"])
        if query_vector is None or route_name == "c2f":
            continue  # C2F re-ranks a shortlist: its exact answer is tested in tests/index
        scores = _scores(query_vector, vectors[matching], dim, scoring)
        expected = [matching[i] for i in np.argsort(-scores, kind="stable")[:K]]
        assert got[0] == expected[0]
        np.testing.assert_allclose(
            [hit["score"] for hit in result["hits"]], np.sort(scores)[::-1][:K], atol=1e-5
        )


def test_get_takes_the_filter_as_json_text_and_agrees_with_post(
    client: TestClient, texts: list[str]
) -> None:
    where = {"and": [{"key": "class", "eq": "Sports"}, {"key": "year", "gte": 2012}]}
    single = client.get("/search", params={"q": texts[9], "k": 5, "filter": json.dumps(where)})
    assert single.status_code == 200, single.text
    batch = client.post("/search", json={"queries": [texts[9]], "k": 5, "filter": where})
    (result,) = batch.json()["results"]
    assert [hit["id"] for hit in single.json()["hits"]] == [hit["id"] for hit in result["hits"]]
    assert single.json()["route"]["filter"] == {
        **result["route"]["filter"],
        "resolve_ms": single.json()["route"]["filter"]["resolve_ms"],
    }
    for hit in result["hits"]:
        assert hit["metadata"]["class"] == "Sports" and hit["metadata"]["year"] >= 2012


def test_k_hits_when_k_match_fewer_when_fewer_none_when_none(client: TestClient) -> None:
    few = {"and": [{"key": "year", "eq": 2003}, {"key": "class", "eq": "Business"}]}  # 10 docs
    for granularity, rerank in (("coarse", "none"), ("fine", "none"), ("fine", "c2f")):
        body = {"queries": ["bank trade"], "granularity": granularity, "rerank": rerank}
        for k, expected in ((5, 5), (50, 10)):
            results = client.post("/search", json={**body, "k": k, "filter": few}).json()
            assert len(results["results"][0]["hits"]) == expected
        none = {"key": "class", "eq": "Cooking"}
        result = client.post("/search", json={**body, "filter": none}).json()["results"][0]
        counted = None if _on_milvus(client) else 0
        assert result["hits"] == [] and result["route"]["filter"]["matching"] == counted


def test_a_write_shows_in_the_next_filtered_search(client: TestClient) -> None:
    where = {"key": "class", "eq": "Cooking"}
    assert (
        client.post("/search", json={"queries": ["x"], "filter": where}).json()["results"][0][
            "hits"
        ]
        == []
    )
    added = client.post(
        "/documents",
        json={"documents": [{"id": "cook", "text": "a recipe", "metadata": {"class": "Cooking"}}]},
    )
    assert added.status_code == 200, added.text
    hits = client.post("/search", json={"queries": ["x"], "filter": where}).json()["results"][0]
    assert [hit["id"] for hit in hits["hits"]] == ["cook"]
    assert client.delete("/documents/cook").status_code in (200, 204)
    hits = client.post("/search", json={"queries": ["x"], "filter": where}).json()["results"][0]
    assert hits["hits"] == []


@pytest.mark.parametrize(
    ("where", "param", "message"),
    [
        ({"key": "class", "like": "B%"}, "filter.like", "unknown operator 'like'"),
        (
            {"and": [{"key": "class", "eq": "x"}, {"key": "year", "gte": [1]}]},
            "filter.and[1].gte",
            "number or a string",
        ),
        ({"or": []}, "filter.or", "non-empty list"),
        ({"key": "year", "eq": None}, "filter.eq", "exists"),
        (
            {
                "not": {
                    "not": {
                        "not": {"not": {"not": {"not": {"not": {"not": {"key": "a", "eq": 1}}}}}}
                    }
                }
            },
            "filter.not.not.not.not.not.not.not.not",
            "nest at most 8",
        ),
    ],
)
def test_bad_filters_are_422_with_the_path(
    client: TestClient, where: dict, param: str, message: str
) -> None:
    post = client.post("/search", json={"queries": ["x"], "filter": where})
    get = client.get("/search", params={"q": "x", "filter": json.dumps(where)})
    for response in (post, get):
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["type"] == "invalid_request"
        assert error["param"] == param
        assert message in error["message"] and error["message"].startswith(param)


def test_malformed_filter_values_are_422(client: TestClient) -> None:
    not_json = client.get("/search", params={"q": "x", "filter": "{class: Business}"})
    assert not_json.status_code == 422
    assert not_json.json()["error"]["param"] == "filter"
    assert "not valid JSON" in not_json.json()["error"]["message"]
    not_object = client.get("/search", params={"q": "x", "filter": "[1, 2]"})
    assert not_object.status_code == 422
    assert not_object.json()["error"]["param"] == "filter"
    listed = client.post("/search", json={"queries": ["x"], "filter": [{"key": "a", "eq": 1}]})
    assert listed.status_code == 422
    assert listed.json()["error"]["param"] == "filter"
