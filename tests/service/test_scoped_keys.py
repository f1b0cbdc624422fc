"""Scoped API keys (``FRACTAL_API_KEYS_FILE``): every operation of the contract with every scope,
the collection listing, rotation without a restart, and a keys file that cannot be used."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from bundle import load_bundle
from encoding.encoder import OnnxEncoder
from service.access import RELOAD_INTERVAL_S
from service.settings import Settings
from tests.service.helpers import make_settings, serve

CONTRACT = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"
FULL = "full-key-for-the-scope-tests-0001"
RANK = {"read": 0, "write": 1, "admin": 2}
KEYS = {
    # name: (key, scope, collections or None for all)
    "read alpha": ("read-alpha-key-000000001", "read", {"alpha"}),
    "write alpha": ("write-alpha-key-00000001", "write", {"alpha"}),
    "admin alpha": ("admin-alpha-key-00000001", "admin", {"alpha"}),
    "read all": ("read-all-key-00000000001", "read", None),
    "write default": ("write-default-key-000001", "write", {"default"}),
}
KEY_FILE = "\n".join(
    [
        "# the scope tests' keys",
        *(
            f"{key} {scope} {'*' if names is None else ','.join(sorted(names))}  # {name}"
            for name, (key, scope, names) in KEYS.items()
        ),
    ]
)
TEXT = {"documents": [{"id": "d-1", "text": "play some jazz"}]}


def _vectors_body(bundle: Path) -> dict:
    manifest = load_bundle(bundle)
    vector = OnnxEncoder(bundle, manifest, threads=1).encode(["play some jazz"]).vectors[0]
    document = {"id": "v-1", "text": "play some jazz", "vector": vector.tolist()}
    return {"bundle_hash": manifest.content_hash, "documents": [document]}


def _operations(vectors: dict, model: str) -> list[tuple[str, str, dict | None, str | None, str]]:
    """Every operation of the contract: method, path, body, the scope it needs (None: any valid
    key) and the collection it touches. ``zeta`` does not exist; the others do."""
    lookup, search = {"ids": ["d-1"]}, {"queries": ["jazz"], "collection": "beta"}
    return [
        ("POST", "/embed", {"texts": ["a"]}, None, ""),
        ("POST", "/v1/embeddings", {"input": "a", "model": model}, None, ""),
        ("GET", "/v1/models", None, None, ""),
        ("GET", f"/v1/models/{model}", None, None, ""),
        ("POST", "/documents", TEXT, "write", "default"),
        ("POST", "/documents/vectors", vectors, "write", "default"),
        ("POST", "/documents/lookup", lookup, "read", "default"),
        ("GET", "/documents/d-1", None, "read", "default"),
        ("DELETE", "/documents/nothing-here", None, "write", "default"),
        ("GET", "/collections", None, None, ""),
        ("POST", "/collections", {"name": "alpha"}, "admin", "alpha"),
        ("DELETE", "/collections/zeta", {"name": "zeta"}, "admin", "zeta"),
        ("GET", "/search?q=jazz&collection=alpha", None, "read", "alpha"),
        ("POST", "/search", search, "read", "beta"),
        ("GET", "/health", None, None, ""),
        ("GET", "/ready", None, None, ""),
        ("GET", "/info", None, None, ""),
        ("GET", "/metrics", None, None, ""),
        ("GET", "/ui", None, None, ""),
        ("POST", "/collections/alpha/documents", TEXT, "write", "alpha"),
        ("POST", "/collections/beta/documents/vectors", vectors, "write", "beta"),
        ("POST", "/collections/alpha/documents/lookup", lookup, "read", "alpha"),
        ("GET", "/collections/beta/documents/d-1", None, "read", "beta"),
        ("DELETE", "/collections/alpha/documents/nothing-here", None, "write", "alpha"),
    ]


def _allowed(name: str, needed: str | None, collection: str) -> bool:
    _, scope, names = KEYS[name]
    if needed is None:
        return True
    return RANK[scope] >= RANK[needed] and (names is None or collection in names)


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def scoped(tiny_bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A service with one full key and the scoped keys file, nothing public, and the named
    collections alpha and beta."""
    folder = tmp_path_factory.mktemp("scoped")
    key_file = folder / "keys.txt"
    key_file.write_text(KEY_FILE, encoding="utf-8")
    settings = make_settings(
        tiny_bundle_dir,
        folder / "index",
        api_keys=FULL,
        api_keys_file=key_file,
        public_health=False,
        public_metrics=False,
        public_playground=False,
    )
    with serve(settings) as client:
        for name in ("alpha", "beta"):
            created = client.post("/collections", json={"name": name}, headers=_auth(FULL))
            assert created.status_code == 201, created.text
        model = client.get("/info", headers=_auth(FULL)).json()["model"]
        yield client, _operations(_vectors_body(tiny_bundle_dir), model)


def _template(path: str) -> str:
    """The contract's path of a concrete one: ``/collections/alpha/documents/d-1`` →
    ``/collections/{collection}/documents/{doc_id}``."""
    parts = path.split("?")[0].split("/")
    if parts[1:3] == ["v1", "models"] and len(parts) == 4:
        parts[3] = "{model}"
    if len(parts) >= 3 and parts[1] == "collections":
        parts[2] = "{name}" if len(parts) == 3 else "{collection}"
    if parts[-2] == "documents" and parts[-1] not in ("vectors", "lookup"):
        parts[-1] = "{doc_id}"
    return "/".join(parts)


def test_the_table_covers_every_operation_of_the_contract() -> None:
    schema = json.loads(CONTRACT.read_text(encoding="utf-8"))
    contract = {(m.upper(), path) for path, ops in schema["paths"].items() for m in ops}
    table = _operations({}, "model")
    assert {(method, _template(path)) for method, path, *_ in table} == contract
    assert len(table) == len(contract)


@pytest.mark.parametrize("name", list(KEYS))
@pytest.mark.parametrize("row", range(len(_operations({}, "model"))))
def test_every_operation_with_every_scope(scoped, name: str, row: int) -> None:
    client, operations = scoped
    method, path, body, needed, collection = operations[row]
    key = KEYS[name][0]
    response = client.request(method, path, json=body, headers=_auth(key))
    assert response.status_code != 401, response.text
    if _allowed(name, needed, collection):
        assert response.status_code != 403, (method, path, response.text)
    else:
        assert response.status_code == 403, (method, path, response.text)
        error = response.json()["error"]
        assert error["type"] == "forbidden"
        assert repr(collection) in error["message"] and key not in response.text


def test_a_refused_write_stores_nothing(scoped) -> None:
    client, _ = scoped
    body = {"documents": [{"id": "refused-1", "text": "not for you"}]}
    read_key = KEYS["read alpha"][0]
    refused = client.post("/collections/alpha/documents", json=body, headers=_auth(read_key))
    assert refused.status_code == 403
    found = client.post(
        "/collections/alpha/documents/lookup", json={"ids": ["refused-1"]}, headers=_auth(FULL)
    )
    assert found.json() == {"found": []}


@pytest.mark.parametrize(
    ("name", "listed"),
    [
        ("read alpha", ["alpha"]),
        ("write default", ["default"]),
        ("read all", ["alpha", "beta", "default"]),
    ],
)
def test_the_listing_shows_only_the_keys_collections(scoped, name: str, listed: list) -> None:
    client, _ = scoped
    answer = client.get("/collections", headers=_auth(KEYS[name][0]))
    assert sorted(c["name"] for c in answer.json()["collections"]) == listed


def _wait_for_reload() -> None:
    time.sleep(RELOAD_INTERVAL_S * 1.2)


def test_keys_rotate_without_a_restart(
    tiny_bundle_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old, new = "rotating-key-old-00000001", "rotating-key-new-000000001"
    key_file = tmp_path / "keys.txt"
    key_file.write_text(f"{old} read *\n", encoding="utf-8")
    with serve(
        make_settings(tiny_bundle_dir, tmp_path / "index", api_keys_file=key_file)
    ) as client:
        assert client.get("/info", headers=_auth(old)).status_code == 200
        assert client.get("/info", headers=_auth(new)).status_code == 401
        key_file.write_text(f"{new} read *\n", encoding="utf-8")
        _wait_for_reload()
        assert client.get("/info", headers=_auth(new)).status_code == 200
        assert client.get("/info", headers=_auth(old)).status_code == 401
        # A file that no longer parses keeps the last good keys, and the log names the line.
        key_file.write_text(f"{new} read *\nshort read *\n", encoding="utf-8")
        _wait_for_reload()
        with caplog.at_level(logging.ERROR, logger="service"):
            assert client.get("/info", headers=_auth(new)).status_code == 200
        assert "line 2" in caplog.text and new not in caplog.text


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("only-two-fields-000000000 read\n", "line 1: expected KEY SCOPE COLLECTIONS"),
        ("# comment\nshort read *\n", "line 2: the key has fewer than 16 characters"),
        ("a-long-enough-key-0000001 owner *\n", "line 1: the scope must be one of"),
        ("a-long-enough-key-0000001 read a,,b\n", "line 1: an empty collection name"),
        (
            "a-long-enough-key-0000001 read *\na-long-enough-key-0000001 write *\n",
            "line 2: the key repeats",
        ),
    ],
)
def test_a_bad_keys_file_stops_the_start_naming_the_line(
    tiny_bundle_dir: Path, tmp_path: Path, text: str, problem: str
) -> None:
    key_file = tmp_path / "keys.txt"
    key_file.write_text(text, encoding="utf-8")
    with pytest.raises(ValidationError) as raised:
        Settings(bundle_dir=tiny_bundle_dir, index_dir=tmp_path, api_keys_file=key_file)
    message = str(raised.value)
    assert problem in message
    assert "a-long-enough-key" not in message and "only-two-fields" not in message
