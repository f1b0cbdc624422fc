"""The playground page (``GET /ui``) in a real headless Chromium against a real service with an
API key: the page loads without the key and asks for it, a query fills every column with hits,
its route and its timings, the query's vector is drawn per prefix, and a bad filter shows the
service's own 422 message. A screenshot is written to the test artifacts
(``FRACTAL_TEST_ARTIFACTS``, default ``.artifacts/``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from benchmarks.harness.processes import ROOT
from client import FractalClient, RequestRefused
from tests.servers import require_binary, start_server

playwright = pytest.importorskip("playwright.sync_api")

from tests.e2e.playground_page import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_INSTALL,
    COLUMNS,
    column,
    open_page,
    search,
)

KEY = "playground-test-key-000001"
TEXTS = ["aaa bbb ccc", "xxx yyy zzz", "111 222 333", "mmm nnn ooo", "ppp qqq rrr"]
BAD_FILTER = '{"key": "lang", "gt": }'


@pytest.fixture(scope="module")
def service(tiny_bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_binary(Path(CHROMIUM).name, CHROMIUM_INSTALL)
    directory = tmp_path_factory.mktemp("playground")
    server = start_server(
        tiny_bundle_dir, directory / "index", directory / "service.log", api_keys=KEY
    )
    try:
        with FractalClient(server.base_url, api_key=KEY) as client:
            documents = [
                {"id": f"doc-{n}", "text": text, "metadata": {"lang": "en" if n % 2 else "fr"}}
                for n, text in enumerate(TEXTS)
            ]
            client.add_documents(documents)
        yield server.base_url
    finally:
        server.shut_down()


def _artifacts() -> Path:
    folder = Path(os.environ.get("FRACTAL_TEST_ARTIFACTS", ROOT / ".artifacts"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_the_page_asks_for_the_key_the_service_needs(service: str) -> None:
    policy = httpx.get(f"{service}/ui").headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in policy and "connect-src 'self'" in policy
    with open_page(service) as page:
        page.wait_for_selector("#error:text-matches('^401 ')")
        assert "type the API key" in page.inner_text("#error")
        assert page.inner_text("#model") == "not connected"


def test_a_query_fills_every_column_and_draws_each_prefix(service: str) -> None:
    with open_page(service) as page:
        search(page, TEXTS[1], key=KEY)
        shown = {name: column(page, name) for name in COLUMNS}
        page.wait_for_selector("#prefixes canvas")
        canvases = page.locator("#prefixes canvas")
        prefixes = [canvases.nth(n).get_attribute("data-dim") for n in range(canvases.count())]
        page.screenshot(path=str(_artifacts() / "playground.png"), full_page=True)
        error = page.inner_text("#error")
        model = page.inner_text("#model")
    with FractalClient(service, api_key=KEY) as client:
        info = client.info()
        expected = {
            name: client.search(TEXTS[1], k=5, **options)
            for name, options in (
                ("coarse", {"granularity": "coarse"}),
                ("fine", {"granularity": "fine"}),
                ("c2f", {"granularity": "fine", "rerank": "c2f"}),
                ("auto", {"granularity": "auto"}),
            )
        }
    assert error == ""
    assert model.startswith(info["model"]) and f"{len(TEXTS)} documents" in model
    assert prefixes == [str(dim) for dim in info["resolutions"]["prefix_dims"]]
    for name, result in expected.items():
        assert shown[name]["state"] == "done", shown[name]
        assert shown[name]["hits"] == [hit.text for hit in result.hits]
        assert shown[name]["hits"][0] == TEXTS[1]
        route = str(shown[name]["route"])
        assert route.startswith(f"{result.route.granularity} · {result.route.dimension}-d")
        assert "total" in str(shown[name]["timings"]) and "ms" in str(shown[name]["timings"])
    assert "rerank c2f" in str(shown["c2f"]["route"])


def test_a_filter_narrows_every_column(service: str) -> None:
    with open_page(service) as page:
        search(page, TEXTS[0], key=KEY, filter='{"key": "lang", "eq": "en"}')
        shown = {name: column(page, name) for name in COLUMNS}
    english = {text for n, text in enumerate(TEXTS) if n % 2}
    for name in COLUMNS:
        assert shown[name]["state"] == "done"
        assert set(shown[name]["hits"]) == english


def test_a_bad_filter_shows_the_services_message(service: str) -> None:
    with FractalClient(service, api_key=KEY) as client:
        with pytest.raises(RequestRefused) as refused:
            client.request("GET", "/search", params={"q": "x", "filter": BAD_FILTER})
    assert refused.value.status_code == 422
    with open_page(service) as page:
        search(page, TEXTS[0], key=KEY, filter=BAD_FILTER)
        error = page.inner_text("#error")
        states = {name: column(page, name)["state"] for name in COLUMNS}
    assert error.startswith("422 ") and refused.value.message in error
    assert set(states.values()) == {"error"}
