"""``openapi/openapi.json`` is the published contract: it must be what the app serves."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.limits import DOT_SEGMENT, NON_BLANK
from service.openapi import schema_text
from tests.service.helpers import make_settings, serve
from tests.tiny_bundle import MAX_TOKENS, NAME, PREFIX_DIMS, tiny_tokenizer

CONTRACT = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"
REGENERATE = "regenerate it: python -m service.openapi > openapi/openapi.json"
KEY = "contract-key-0123456789"


def test_committed_contract_equals_the_served_schema() -> None:
    assert json.loads(CONTRACT.read_text(encoding="utf-8")) == create_app().openapi(), REGENERATE


def test_committed_contract_is_the_pretty_printed_schema() -> None:
    assert CONTRACT.read_text(encoding="utf-8") == schema_text(), REGENERATE


def test_contract_documents_every_endpoint_and_the_error_shape() -> None:
    schema = json.loads(CONTRACT.read_text(encoding="utf-8"))
    assert set(schema["paths"]) == {
        "/embed",
        "/v1/embeddings",
        "/v1/models",
        "/v1/models/{model}",
        "/documents",
        "/documents/vectors",
        "/documents/lookup",
        "/documents/{doc_id}",
        "/collections",
        "/collections/{name}",
        "/collections/{collection}/documents",
        "/collections/{collection}/documents/vectors",
        "/collections/{collection}/documents/lookup",
        "/collections/{collection}/documents/{doc_id}",
        "/search",
        "/health",
        "/ready",
        "/info",
        "/metrics",
        "/ui",
    }
    assert set(schema["paths"]["/search"]) == {"get", "post"}
    assert set(schema["paths"]["/documents/{doc_id}"]) == {"get", "delete"}
    error_shape = {"$ref": "#/components/schemas/ErrorResponse"}
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if status.startswith(("4", "5")) and not (
                    status == "400" and "requestBody" not in operation
                ):
                    content = response["content"]["application/json"]["schema"]
                    assert content == error_shape, (path, method, status)
            # The HTTP server's own answer to a request it cannot parse: plain text, anywhere.
            plain = operation["responses"]["400"]["content"]["text/plain"]["schema"]
            assert plain == {"type": "string"}, (path, method)
            if "requestBody" in operation or operation.get("parameters"):
                assert "422" in operation["responses"], (path, method)
    assert "HTTPValidationError" not in schema["components"]["schemas"]


def _body_schema(schema: dict, name: str) -> dict:
    return schema["components"]["schemas"][name]["properties"]


def _query(schema: dict, path: str, name: str) -> dict:
    parameters = schema["paths"][path]["get"]["parameters"]
    return next(parameter["schema"] for parameter in parameters if parameter["name"] == name)


def _without_null(field: dict) -> dict:
    """The one non-null branch of an optional field's ``anyOf``."""
    (branch,) = [branch for branch in field["anyOf"] if branch.get("type") != "null"]
    return branch


def _states(field: dict, keywords: dict) -> bool:
    return {key: field.get(key) for key in keywords} == keywords


def test_the_committed_contract_states_the_default_limits_and_no_security() -> None:
    schema = json.loads(CONTRACT.read_text(encoding="utf-8"))
    text = {"type": "string", "minLength": 1, "maxLength": 8192, "pattern": NON_BLANK.pattern}
    texts = _body_schema(schema, "EmbedRequest")["texts"]
    assert texts["items"] == text and _states(texts, {"minItems": 1, "maxItems": 128})
    assert _body_schema(schema, "SearchBatch")["queries"]["maxItems"] == 128
    assert _states(_query(schema, "/search", "q"), text)
    assert _without_null(_query(schema, "/search", "k")) == {
        "type": "integer", "minimum": 1, "maximum": 100
    }  # fmt: skip
    document = _body_schema(schema, "DocumentIn")
    assert _states(document["text"], text)
    document_id = _without_null(document["id"])
    assert document_id["maxLength"] == 256
    assert document_id["not"] == {"pattern": DOT_SEGMENT.pattern}
    assert "securitySchemes" not in schema["components"] and "security" not in schema
    for operations in schema["paths"].values():
        for operation in operations.values():
            assert "401" not in operation["responses"]
            if "requestBody" in operation:
                assert {"400", "413", "422"} <= set(operation["responses"])


def test_blank_means_the_same_to_the_schema_and_to_python() -> None:
    # JSON Schema's \s (ECMA-262) is not Python's: the pattern spells Python's out.
    for code in range(0x110000):
        if not 0xD800 <= code < 0xE000:
            character = chr(code)
            assert (NON_BLANK.search(character) is None) == character.isspace(), hex(code)


@pytest.fixture(scope="module")
def client(tiny_bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """A service with keys, its own limits and the tiny bundle; requests carry the key."""
    settings = make_settings(
        tiny_bundle_dir,
        tmp_path_factory.mktemp("contract-index"),
        api_keys=KEY,
        max_texts=7,
        max_chars=500,
        max_k=30,
        index_kinds="exact",
    )
    with serve(settings) as client:
        client.headers["Authorization"] = f"Bearer {KEY}"
        yield client


@pytest.fixture(scope="module")
def served(client: TestClient) -> dict:
    """The schema that service serves."""
    response = client.get("/openapi.json")
    assert response.status_code == 200
    return response.json()


def test_the_served_contract_states_the_settings_limits(served: dict) -> None:
    texts = _body_schema(served, "EmbedRequest")["texts"]
    assert (texts["maxItems"], texts["items"]["maxLength"]) == (7, 500)
    assert _body_schema(served, "AddDocumentsRequest")["documents"]["maxItems"] == 7
    assert _without_null(_query(served, "/search", "k"))["maximum"] == 30


def test_the_served_contract_enumerates_what_the_bundle_serves(served: dict) -> None:
    dims = _body_schema(served, "EmbedRequest")["dims"]["anyOf"]
    assert dims[0]["enum"] == list(PREFIX_DIMS) and dims[1]["items"]["enum"] == list(PREFIX_DIMS)
    openai = _body_schema(served, "EmbeddingsRequest")
    assert openai["model"]["enum"] == [NAME]
    assert _without_null(openai["dimensions"])["enum"] == list(PREFIX_DIMS)
    token_ids = openai["input"]["anyOf"][2]
    assert token_ids["maxItems"] == MAX_TOKENS
    assert token_ids["items"]["maximum"] == tiny_tokenizer().get_vocab_size() - 1
    assert _without_null(_query(served, "/search", "index"))["enum"] == ["exact"]
    assert _query(served, "/search", "scoring")["enum"] == ["cosine"]
    assert _without_null(_query(served, "/search", "shortlist_dim"))["enum"] == [64, 384]
    vectors = served["components"]["schemas"]["AddVectorsRequest"]["properties"]
    assert len(vectors["bundle_hash"]["enum"]) == 1
    vector = _body_schema(served, "VectorDocumentIn")["vector"]
    assert vector["minItems"] == vector["maxItems"] == 384


def test_the_served_contract_requires_the_key_where_the_service_does(served: dict) -> None:
    assert served["components"]["securitySchemes"]["apiKey"]["scheme"] == "bearer"
    assert served["security"] == [{"apiKey": []}]
    for path, operations in served["paths"].items():
        for operation in operations.values():
            public = path in ("/health", "/ready", "/metrics", "/ui")
            assert (operation.get("security") == []) is public, path
            assert ("401" in operation["responses"]) is not public, path


def test_stored_documents_link_to_reading_and_deleting_them(served: dict) -> None:
    for path in ("/documents", "/documents/vectors"):
        links = served["paths"][path]["post"]["responses"]["200"]["links"]
        assert {name: link["operationRef"] for name, link in links.items()} == {
            "GetDocument": "#/paths/~1documents~1{doc_id}/get",
            "DeleteDocument": "#/paths/~1documents~1{doc_id}/delete",
        }
        for link in links.values():
            assert link["parameters"] == {"doc_id": "$response.body#/ids/0"}


@pytest.mark.parametrize("method", ["OPTIONS", "PUT", "PATCH"])
def test_a_method_not_allowed_names_the_methods_the_schema_declares_for_the_path(
    client: TestClient, served: dict, method: str
) -> None:
    for path, operations in served["paths"].items():
        response = client.request(method, path.replace("{doc_id}", "some/id"))
        assert response.status_code == 405, (method, path)
        assert response.json()["error"]["type"] == "method_not_allowed"
        allowed = {name.strip().lower() for name in response.headers["allow"].split(",")}
        assert allowed == set(operations), (method, path)
