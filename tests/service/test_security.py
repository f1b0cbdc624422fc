"""API keys on every route of the published OpenAPI document, the body size limit and CORS."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from benchmarks.harness.metrics import metric, metric_samples
from service.settings import Settings, describe_settings_error
from tests.service.helpers import serve

CONTRACT = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"
KEY = "k3y-for-the-tests-0123456789"
OTHER_KEY = "another-key-for-tests-98765"
WRONG_KEY = "k3y-for-the-tests-0123456788"
ORIGIN = "https://dashboard.example.org"
LIMIT = 4096


def _operations() -> list[tuple[str, str]]:
    """Every (method, path) of the committed OpenAPI document, path parameters filled in."""
    schema = json.loads(CONTRACT.read_text(encoding="utf-8"))
    return [
        (
            method.upper(),
            path.replace("{doc_id}", "some-id")
            .replace("{collection}", "some-collection")
            .replace("{name}", "some-collection"),
        )
        for path, operations in schema["paths"].items()
        for method in operations
    ]


def _call(client: TestClient, method: str, path: str, key: str | None, scheme: str = "Bearer"):
    headers = {} if key is None else {"Authorization": f"{scheme} {key}"}
    body = {"texts": ["a"]} if method == "POST" else None
    return client.request(method, path, headers=headers, json=body)


@pytest.fixture(scope="module")
def locked(tiny_bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A service with two keys, nothing public, a small body limit and one allowed origin."""
    settings = Settings(
        bundle_dir=tiny_bundle_dir,
        index_dir=tmp_path_factory.mktemp("locked-index"),
        encoder_threads=1,
        snapshot_interval_s=0,
        api_keys=f"{KEY}, {OTHER_KEY}",
        public_health=False,
        public_metrics=False,
        public_playground=False,
        max_body_bytes=LIMIT,
        cors_origins=ORIGIN,
    )
    with serve(settings) as client:
        yield client


def test_the_walk_covers_every_route_of_the_app() -> None:
    assert len(_operations()) == 24


@pytest.mark.parametrize(("method", "path"), _operations())
@pytest.mark.parametrize(
    ("key", "scheme"), [(None, "Bearer"), (WRONG_KEY, "Bearer"), (KEY, "Basic"), ("", "Bearer")]
)
def test_every_route_refuses_a_missing_or_wrong_key(
    locked: TestClient, method: str, path: str, key: str | None, scheme: str
) -> None:
    response = _call(locked, method, path, key, scheme)
    assert response.status_code == 401, response.text
    assert response.json()["error"]["type"] == "unauthorized"
    assert response.headers["www-authenticate"] == "Bearer"
    assert WRONG_KEY not in response.text and KEY not in response.text


@pytest.mark.parametrize(("method", "path"), _operations())
def test_every_route_accepts_either_key(locked: TestClient, method: str, path: str) -> None:
    for key in (KEY, OTHER_KEY):
        assert _call(locked, method, path, key).status_code != 401


def _refusals(client: TestClient) -> float:
    client.headers["Authorization"] = f"Bearer {KEY}"
    try:
        return metric(metric_samples(client), "fractal_errors_total", kind="unauthorized")
    finally:
        del client.headers["Authorization"]


def test_refusals_are_counted(locked: TestClient) -> None:
    before = _refusals(locked)
    assert _call(locked, "GET", "/info", None).status_code == 401
    assert _refusals(locked) == before + 1


def test_health_and_metrics_are_open_by_default(
    tiny_bundle_dir: Path, settings_for: Callable[..., Settings]
) -> None:
    with serve(settings_for(tiny_bundle_dir, api_keys=KEY)) as client:
        for path in ("/health", "/ready", "/metrics", "/ui"):
            assert client.get(path).status_code == 200, path
        assert client.get("/info").status_code == 401
        assert client.post("/embed", json={"texts": ["a"]}).status_code == 401
        assert client.get("/openapi.json").status_code == 401


def test_without_keys_everything_is_open(
    tiny_bundle_dir: Path, settings_for: Callable[..., Settings]
) -> None:
    with serve(settings_for(tiny_bundle_dir)) as client:
        assert client.get("/info").status_code == 200
        assert client.post("/embed", json={"texts": ["a"]}).status_code == 200


def _authorized() -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}


def _body_of(size: int) -> bytes:
    """A valid /embed body of exactly ``size`` bytes."""
    frame = b'{"texts": ["' + b'"]}'
    return frame[:12] + b"a" * (size - len(frame)) + frame[12:]


def test_a_body_over_the_limit_is_413_and_one_at_the_limit_is_served(locked: TestClient) -> None:
    headers = _authorized()
    at_limit = locked.post("/embed", content=_body_of(LIMIT), headers=headers)
    assert at_limit.status_code == 200, at_limit.text
    over = locked.post("/embed", content=_body_of(LIMIT + 1), headers=headers)
    assert over.status_code == 413
    assert over.json()["error"]["type"] == "payload_too_large"
    assert str(LIMIT) in over.json()["error"]["message"]


def test_a_chunked_body_over_the_limit_is_413(locked: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        body = _body_of(LIMIT * 3)
        for start in range(0, len(body), 1000):
            yield body[start : start + 1000]

    response = locked.post("/embed", content=chunks(), headers=_authorized())
    assert response.status_code == 413


def test_cors_allows_the_listed_origin_only(locked: TestClient) -> None:
    preflight = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization",
    }
    allowed = locked.options("/embed", headers={"Origin": ORIGIN, **preflight})
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == ORIGIN
    assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
    other = locked.options("/embed", headers={"Origin": "https://evil.example", **preflight})
    assert other.status_code == 400
    assert "access-control-allow-origin" not in other.headers
    refused = locked.get("/info", headers={"Origin": ORIGIN})
    assert refused.status_code == 401
    assert refused.headers["access-control-allow-origin"] == ORIGIN


def test_a_short_key_is_refused_without_showing_it(tiny_bundle_dir: Path) -> None:
    with pytest.raises(ValidationError) as error:
        Settings(bundle_dir=tiny_bundle_dir, api_keys="short-secret")
    message = describe_settings_error(error.value)
    assert "FRACTAL_API_KEYS" in message and "16" in message
    assert "short-secret" not in message
    assert KEY not in repr(Settings(bundle_dir=tiny_bundle_dir, api_keys=KEY))
