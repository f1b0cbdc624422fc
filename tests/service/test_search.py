"""``/search`` over CLINC-150 documents: every route checked against numpy on the vectors that
``/embed`` returns, the route reported, C2F's recall, and the auto policy; on both index
backends (the ``backend`` fixture)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.service.bundles import clinc
from tests.service.helpers import add_documents, make_settings, serve

NUM_DOCUMENTS = 300
NUM_QUERIES = 40
K = 10


@pytest.fixture(scope="module")
def corpus() -> tuple[list[str], list[str]]:
    """Documents (CLINC training utterances) and queries (held-out test utterances)."""
    splits = clinc()
    return list(splits.train.texts[:NUM_DOCUMENTS]), list(splits.test.texts[:NUM_QUERIES])


@pytest.fixture(scope="module")
def client(
    v5_bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory, corpus: tuple, backend
) -> Iterator[TestClient]:
    settings = make_settings(
        v5_bundle_dir,
        tmp_path_factory.mktemp("search-index"),
        index_kinds="exact,hnsw",
        sfs=True,
        sfs_fragment_dim=32,
        max_k=NUM_DOCUMENTS,
        **backend(),
    )
    with serve(settings) as client:
        client.ids = add_documents(client, corpus[0])  # type: ignore[attr-defined]
        yield client


def _embed(client: TestClient, texts: list[str], normalize: bool = False) -> np.ndarray:
    vectors = []
    for start in range(0, len(texts), 100):
        body = client.post(
            "/embed", json={"texts": texts[start : start + 100], "normalize": normalize}
        ).json()
        vectors += [item["embeddings"][0]["vector"] for item in body["data"]]
    return np.array(vectors, dtype=np.float64)


@pytest.fixture(scope="module")
def vectors(client: TestClient, corpus: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Raw full vectors of the documents and the queries, as /embed returns them."""
    documents, queries = corpus
    return _embed(client, documents), _embed(client, queries)


def _unit(matrix: np.ndarray) -> np.ndarray:
    return matrix / np.linalg.norm(matrix, axis=-1, keepdims=True)


def _cosines(queries: np.ndarray, documents: np.ndarray, dim: int) -> np.ndarray:
    return _unit(queries[:, :dim]) @ _unit(documents[:, :dim]).T


def _search(client: TestClient, queries: list[str], **options: object) -> list[dict]:
    response = client.post("/search", json={"queries": queries, **options})
    assert response.status_code == 200, response.text
    return response.json()["results"]


def _check_ranking(results: list[dict], scores: np.ndarray, ids: list[str]) -> None:
    """Each result lists the top documents of its ``scores`` row, best first, with their scores."""
    for result, row in zip(results, scores, strict=True):
        got = [hit["id"] for hit in result["hits"]]
        expected = np.argsort(-row, kind="stable")[: len(got)]
        # Ties aside, the same documents in the same order: compare scores position by position.
        scores_given = [hit["score"] for hit in result["hits"]]
        np.testing.assert_allclose(scores_given, row[expected], atol=1e-5)
        np.testing.assert_allclose(row[[ids.index(i) for i in got]], row[expected], atol=1e-5)


@pytest.mark.parametrize(("granularity", "dim"), [("coarse", 64), ("fine", 256)])
def test_exact_search_at_each_granularity_matches_numpy(
    client: TestClient, corpus: tuple, vectors: tuple, granularity: str, dim: int
) -> None:
    documents, queries = vectors
    results = _search(client, corpus[1], k=K, granularity=granularity, index="exact")
    for result in results:
        assert result["route"] == {
            "requested_granularity": granularity,
            "granularity": granularity,
            "dimension": dim,
            "index": "exact",
            "rerank": "none",
            "scoring": "cosine",
            "shortlist_dimension": None,
            "shortlist_k": None,
            "auto": None,
            "filter": None,
        }
        assert len(result["hits"]) == K
    _check_ranking(results, _cosines(queries, documents, dim), client.ids)


def test_hits_carry_text_and_metadata(client: TestClient, corpus: tuple) -> None:
    result = client.get("/search", params={"q": corpus[0][7], "k": 1, "index": "exact"}).json()
    (hit,) = result["hits"]
    assert hit == {
        "id": client.ids[7],
        "score": pytest.approx(1.0, abs=1e-5),
        "text": corpus[0][7],
        "metadata": {"position": 7},
    }
    assert set(result["timings_ms"]) == {"encode", "route", "search", "rerank", "fetch"}
    assert all(value >= 0 for value in result["timings_ms"].values())
    assert result["timings_ms"]["rerank"] == 0.0  # no c2f, no re-rank


def test_c2f_reports_its_rerank_time_apart_where_it_is_a_step(
    client: TestClient, corpus: tuple, backend
) -> None:
    """Milvus's C2F re-ranks after the shortlist comes back; the embedded funnel re-ranks
    inside its one native call, which ``search`` times."""
    result = client.get("/search", params={"q": corpus[1][0], "rerank": "c2f"}).json()
    timings = result["timings_ms"]
    assert timings["search"] > 0.0
    if backend().get("index_backend") == "milvus":
        assert timings["rerank"] > 0.0
    else:
        assert timings["rerank"] == 0.0


def test_get_and_post_agree(client: TestClient, corpus: tuple) -> None:
    queries = corpus[1][:3]
    batch = _search(client, queries, k=5, granularity="coarse", index="hnsw")
    for query, result in zip(queries, batch, strict=True):
        single = client.get(
            "/search", params={"q": query, "k": 5, "granularity": "coarse", "index": "hnsw"}
        ).json()
        assert single["query"] == query == result["query"]
        assert [h["id"] for h in single["hits"]] == [h["id"] for h in result["hits"]]
        assert single["route"] == result["route"]


def test_default_options(client: TestClient, corpus: tuple) -> None:
    result = client.get("/search", params={"q": corpus[1][0]}).json()
    assert len(result["hits"]) == 10  # FRACTAL_DEFAULT_K
    route = result["route"]
    assert (route["granularity"], route["dimension"], route["index"]) == ("fine", 256, "exact")


def test_c2f_reranks_a_coarse_shortlist_at_full_dimension(
    client: TestClient, corpus: tuple, vectors: tuple
) -> None:
    documents, queries = vectors
    results = _search(client, corpus[1], k=K, rerank="c2f", index="exact")
    coarse, full = _cosines(queries, documents, 64), _cosines(queries, documents, 256)
    recalls = []
    for result, coarse_row, full_row in zip(results, coarse, full, strict=True):
        route = result["route"]
        assert (route["dimension"], route["rerank"], route["granularity"]) == (256, "c2f", "fine")
        assert (route["shortlist_dimension"], route["shortlist_k"]) == (64, K * 4)
        got = [client.ids.index(hit["id"]) for hit in result["hits"]]
        shortlist = set(np.argsort(-coarse_row, kind="stable")[: K * 4].tolist())
        assert set(got) <= shortlist  # only shortlisted documents ...
        np.testing.assert_allclose(  # ... scored and ordered by full-dimension cosine
            [hit["score"] for hit in result["hits"]], full_row[got], atol=1e-5
        )
        assert got == sorted(got, key=lambda row: -full_row[row])
        exact = set(np.argsort(-full_row, kind="stable")[:K].tolist())
        recalls.append(len(exact & set(got)) / K)
    # Measured 0.895 on this bundle and corpus (300 documents, 40 queries, shortlist of 40).
    assert np.mean(recalls) >= 0.75


def test_sfs_scores_are_mean_fragment_cosines(
    client: TestClient, corpus: tuple, vectors: tuple
) -> None:
    documents, queries = vectors
    results = _search(client, corpus[1][:5], k=K, scoring="sfs", index="exact")
    fragments = 256 // 32
    split_queries = queries[:5].reshape(5, fragments, 32)
    split_documents = documents.reshape(len(documents), fragments, 32)
    scores = np.einsum("qfd,nfd->qn", _unit(split_queries), _unit(split_documents)) / fragments
    assert all(result["route"]["scoring"] == "sfs" for result in results)
    _check_ranking(results, scores, client.ids)


def test_auto_routes_each_query_by_the_heads(client: TestClient, corpus: tuple) -> None:
    results = _search(client, corpus[1], k=3, granularity="auto", index="exact")
    decisions = {result["route"]["granularity"] for result in results}
    assert decisions == {"coarse", "fine"}  # this query set holds both kinds
    for result in results:
        route, auto = result["route"], result["route"]["auto"]
        assert route["requested_granularity"] == "auto"
        assert auto["decision"] == route["granularity"]
        assert route["dimension"] == {"coarse": 64, "fine": 256}[route["granularity"]]
        assert 0 <= auto["coarse_confidence"] <= 1 and 0 <= auto["fine_confidence"] <= 1
        assert auto["coarse_label"] and auto["fine_label"]
        fine_sure = auto["fine_confidence"] >= 0.5
        coarse_sure = auto["coarse_confidence"] >= 0.5
        expected = "coarse" if not fine_sure and coarse_sure else "fine"
        assert auto["decision"] == expected, auto


def test_auto_with_c2f_reranks_only_fine_decisions(client: TestClient, corpus: tuple) -> None:
    results = _search(client, corpus[1], k=3, granularity="auto", rerank="c2f", index="exact")
    for result in results:
        route = result["route"]
        expected = "c2f" if route["auto"]["decision"] == "fine" else "none"
        assert route["rerank"] == expected


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"k": 0}, "k must be between 1 and 300, got 0"),
        ({"k": -3}, "k must be between 1 and 300, got -3"),
        ({"k": 301}, "k must be between 1 and 300, got 301"),
        ({"k": "ten"}, "k: Input should be a valid integer"),
        ({"index": "pq"}, "index 'pq' is not built; built: exact, hnsw"),
        ({"index": "ivf"}, "'exact', 'hnsw' or 'pq'"),
        ({"granularity": "medium"}, "'coarse', 'fine' or 'auto'"),
        ({"rerank": "cross"}, "'none' or 'c2f'"),
        ({"scoring": "dot"}, "'cosine' or 'sfs'"),
        ({"rerank": "c2f", "granularity": "coarse"}, "use granularity fine or auto"),
        ({"rerank": "c2f", "scoring": "sfs"}, "use scoring=cosine"),
        ({"q": ""}, "q is empty"),
        ({"q": "x" * 8193}, "limit is 8192"),
        ({"kk": 3}, "kk"),
    ],
)
def test_bad_search_options(client: TestClient, params: dict, needle: str) -> None:
    response = client.get("/search", params={"q": "card declined", **params})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["type"] == "invalid_request" and needle in error["message"], error


def test_too_many_queries(client: TestClient) -> None:
    response = client.post("/search", json={"queries": ["a"] * 129})
    assert response.status_code == 422
    assert "limit is 128" in response.json()["error"]["message"]


def test_identity_bundle_auto_is_fine_and_sfs_off(
    tiny_bundle_dir: Path, settings_for, corpus: tuple
) -> None:
    with serve(settings_for(tiny_bundle_dir, index_kinds="hnsw")) as client:
        add_documents(client, corpus[0][:20])
        result = client.get("/search", params={"q": "pay my bill", "granularity": "auto"}).json()
        route = result["route"]
        assert (route["granularity"], route["dimension"], route["index"]) == ("fine", 384, "hnsw")
        assert "no heads.onnx" in route["auto"]["reason"]
        assert route["auto"]["fine_confidence"] is None
        response = client.get("/search", params={"q": "pay my bill", "scoring": "sfs"})
        assert response.status_code == 422
        assert "FRACTAL_SFS" in response.json()["error"]["message"]
