"""No client input produces a 500, and every error answer has the one JSON shape.

A batch of malformed requests (wrong types, huge and negative numbers, nulls, nested junk,
unusual Unicode, broken JSON, wrong methods and media types) is thrown at every endpoint of a
running app; each must get an answer below 500, and every 4xx must be ``{"error": {...}}``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.service.helpers import make_settings, serve
from tests.service.request_corpus import JSON, malformed_requests


@pytest.fixture(scope="module")
def client(v5_bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_settings(v5_bundle_dir, tmp_path_factory.mktemp("errors-index"))
    with serve(settings, raise_server_exceptions=False) as client:
        client.post("/documents", json={"documents": [{"id": "known", "text": "hello"}]})
        yield client


def test_no_malformed_request_gets_a_5xx(client: TestClient) -> None:
    failures = []
    requests = list(malformed_requests())
    for method, path, options in requests:
        response = client.request(method, path, **options)
        if response.status_code >= 500:
            failures.append((method, path, options, response.status_code, response.text[:200]))
        elif response.status_code >= 400:
            error = response.json()["error"]
            assert set(error) == {"type", "message", "param"}, (method, path, options)
            assert error["type"] and error["message"], (method, path, options)
    assert not failures, failures
    assert len(requests) > 300


def test_errors_are_counted_by_type(client: TestClient) -> None:
    client.get("/search", params={"q": "a", "k": "-1"})
    client.get("/documents/nothing-here")
    metrics = client.get("/metrics").text
    assert 'fractal_errors_total{kind="invalid_request"}' in metrics
    assert 'fractal_errors_total{kind="not_found"}' in metrics
    assert 'fractal_errors_total{kind="internal_error"}' not in metrics


@pytest.mark.parametrize(
    ("method", "path", "status", "kind"),
    [
        ("PUT", "/embed", 405, "method_not_allowed"),
        ("GET", "/nowhere", 404, "not_found"),
    ],
)
def test_starlette_errors_use_the_shape(
    client: TestClient, method: str, path: str, status: int, kind: str
) -> None:
    response = client.request(method, path)
    assert response.status_code == status
    assert response.json()["error"]["type"] == kind


def test_invalid_json_is_a_422_that_says_so(client: TestClient) -> None:
    response = client.post("/embed", content=b'{"texts": [', headers=JSON)
    assert response.status_code == 422
    assert response.json()["error"]["message"].startswith("the body is not valid JSON")
