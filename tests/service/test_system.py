"""``/health``, ``/ready``, ``/info`` and ``/metrics`` on a running app, and before it starts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import faiss
import pytest
from fastapi.testclient import TestClient

from benchmarks.harness.metrics import metric_samples
from index import native_funnel
from service.app import create_app
from service.settings import Settings
from tests.service.helpers import make_settings, serve

DOCUMENTS = ["reset my pin", "is it going to rain", "find me a recipe for lasagna"]


@pytest.fixture(scope="module")
def settings(v5_bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return make_settings(
        v5_bundle_dir, tmp_path_factory.mktemp("system-index"), index_kinds="hnsw,exact,pq"
    )


@pytest.fixture(scope="module")
def client(settings: Settings) -> Iterator[TestClient]:
    with serve(settings) as client:
        documents = [{"text": text} for text in DOCUMENTS]
        assert client.post("/documents", json={"documents": documents}).status_code == 200
        yield client


def test_not_started_app_is_alive_but_not_ready(settings: Settings) -> None:
    client = TestClient(create_app(settings))  # no lifespan: nothing loaded
    assert client.get("/health").json() == {"status": "ok"}
    for path in ("/ready", "/info"):
        response = client.get(path)
        assert response.status_code == 503
        assert response.json()["error"]["type"] == "not_ready"
    assert client.post("/embed", json={"texts": ["a"]}).status_code == 503
    assert client.get("/metrics").status_code == 200


def test_ready_once_started(client: TestClient) -> None:
    assert client.get("/ready").json() == {"status": "ready"}


def test_info_lists_resolutions_documents_and_index_sizes(client: TestClient) -> None:
    info = client.get("/info").json()
    assert info["model"] == "clinc150-v5-small"
    assert info["manifest"]["objective"] == "v5"
    assert len(info["bundle_hash"]) == 64
    assert info["resolutions"] == {
        "dim": 256,
        "prefix_dims": [64, 128, 192, 256],
        "granularity": {"coarse": 64, "fine": 256},
        "shortlist_dim": 64,  # a bundle without a measured shortlist: the coarse prefix
        "indexed_dims": [64, 256],
        "fragment_dim": None,
        "first_stage": {
            "source": "settings", "shortlist_dim": 64, "hnsw_storage": "flat", "hnsw_m": 32,
            "walk": native_funnel.walk("flat"),
            "measured": None, "index_choice": None,
        },
        "coarse_beam": {"ef_search": 128, "source": "hnsw_ef_search", "measured": None},
        "c2f": {"ef_search": 128, "factor": 4, "source": "settings", "measured": None},
    }  # fmt: skip
    assert info["auto_routing"] == {
        "heads": True, "policy": "thresholds", "fine_threshold": 0.5, "coarse_threshold": 0.5
    }  # fmt: skip
    assert info["documents"] == len(DOCUMENTS)
    sizes = {(index["dimension"], index["kind"]): index for index in info["indexes"]}
    assert set(sizes) == {(dim, kind) for dim in (64, 256) for kind in ("exact", "hnsw", "pq")}
    for (dim, _), index in sizes.items():
        assert index["vectors"] == len(DOCUMENTS) and index["scoring"] == "cosine"
        assert index["bytes"] > len(DOCUMENTS) * dim * 4  # at least the float32 vectors
    assert sizes[64, "exact"]["bytes"] < sizes[256, "exact"]["bytes"]
    assert info["encoder"]["providers"][-1] == "CPUExecutionProvider"
    assert info["encoder"]["spin"] is False
    assert info["encoder"]["shape_buckets"] is False  # ONNX Runtime: exact shapes
    assert info["search_threads"] == 1
    assert info["limits"]["max_k"] == 100


@pytest.mark.parametrize("buckets", [True, False])
def test_openvino_encoder_calls_are_bucketed_unless_set_otherwise(
    v5_bundle_dir: Path, settings_for: Callable[..., Settings], buckets: bool
) -> None:
    settings = settings_for(
        v5_bundle_dir, encoder_runtime="openvino", encoder_shape_buckets=buckets
    )
    with serve(settings) as client:
        assert client.get("/info").json()["encoder"]["shape_buckets"] is buckets
        embedded = client.post("/embed", json={"texts": ["reset my pin", "a"]})
        assert embedded.status_code == 200, embedded.text


def test_thread_settings_reach_the_encoder_and_the_search_threads(
    v5_bundle_dir: Path, settings_for: Callable[..., Settings]
) -> None:
    """FAISS's OpenMP thread count is per thread: the setting must hold in the threads that
    search (``/info`` reads it there), and loading a runtime must not change the caller's."""
    before = faiss.omp_get_max_threads()
    settings = settings_for(v5_bundle_dir, search_threads=3, encoder_spin=True)
    with serve(settings) as client:
        info = client.get("/info").json()
        assert info["search_threads"] == 3
        assert info["encoder"]["spin"] is True
        search = client.get("/search", params={"q": "reset my pin", "index": "hnsw"})
        assert search.status_code == 200, search.text
    assert faiss.omp_get_max_threads() == before


def test_metrics_follow_the_requests(client: TestClient) -> None:
    before = metric_samples(client)
    search = {"q": "will it snow tomorrow", "granularity": "coarse", "index": "exact"}
    assert client.get("/search", params=search).status_code == 200
    assert client.post("/embed", json={"texts": ["a", "b"], "dims": [64, 128]}).status_code == 200
    assert client.get("/search", params={**search, "k": 0}).status_code == 422
    assert client.get("/documents/a/b").status_code == 404
    assert client.get("/no/such/route").status_code == 404
    after = metric_samples(client)
    assert client.get("/metrics").headers["content-type"].startswith("text/plain")

    def grew(name: str, by: float = 1.0, **labels: str) -> bool:
        key = (name, frozenset(labels.items()))
        return after[key] - before.get(key, 0.0) == by

    request = "fractal_request_duration_seconds_count"
    coarse = {"endpoint": "/search", "granularity": "coarse", "dimension": "64", "index": "exact"}
    assert grew(request, **coarse, status="200")
    embed = {"endpoint": "/embed", "granularity": "", "dimension": "64,128", "index": ""}
    assert grew(request, **embed, status="200")
    assert grew(request, endpoint="/search", granularity="", dimension="", index="", status="422")
    unlabelled = {"granularity": "", "dimension": "", "index": "", "status": "404"}
    assert grew(request, endpoint="/documents/{doc_id}", **unlabelled)
    assert grew(request, endpoint="unmatched", **unlabelled)
    assert grew(
        "fractal_search_duration_seconds_count", dimension="64", index="exact", rerank="none"
    )
    # Two encoder calls (the requests came one after the other) of 1 and 2 texts.
    assert grew("fractal_encode_batch_size_count", by=2)
    assert grew("fractal_encode_batch_size_sum", by=3)
    assert grew("fractal_queue_wait_seconds_count", by=3)
    assert grew("fractal_encode_duration_seconds_count", by=2)
    assert grew("fractal_errors_total", kind="invalid_request")
    assert after["fractal_queue_depth", frozenset()] == 0
    default = {"collection": "default"}
    assert after["fractal_documents", frozenset(default.items())] == len(DOCUMENTS)
    for dim in ("64", "256"):
        for kind in ("exact", "hnsw", "pq"):
            labels = frozenset(
                {**default, "scoring": "cosine", "dimension": dim, "kind": kind}.items()
            )
            assert after["fractal_index_bytes", labels] > 0
            assert after["fractal_index_vectors", labels] == len(DOCUMENTS)


def test_each_app_has_its_own_registry(settings: Settings, client: TestClient) -> None:
    client.get("/health")
    other = TestClient(create_app(settings))
    assert "/health" not in other.get("/metrics").text
    assert "/health" in client.get("/metrics").text
