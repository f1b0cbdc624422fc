"""``openapi/openapi.json`` is the published contract: it must be what the app serves."""

from __future__ import annotations

import json
from pathlib import Path

from service.app import create_app
from service.openapi import schema_text

CONTRACT = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"
REGENERATE = "regenerate it: python -m service.openapi > openapi/openapi.json"


def test_committed_contract_equals_the_served_schema() -> None:
    assert json.loads(CONTRACT.read_text(encoding="utf-8")) == create_app().openapi(), REGENERATE


def test_committed_contract_is_the_pretty_printed_schema() -> None:
    assert CONTRACT.read_text(encoding="utf-8") == schema_text(), REGENERATE


def test_contract_documents_every_endpoint_and_the_error_shape() -> None:
    schema = json.loads(CONTRACT.read_text(encoding="utf-8"))
    assert set(schema["paths"]) == {
        "/embed",
        "/v1/embeddings",
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
    }
    assert set(schema["paths"]["/search"]) == {"get", "post"}
    assert set(schema["paths"]["/documents/{doc_id}"]) == {"get", "delete"}
    error_shape = {"$ref": "#/components/schemas/ErrorResponse"}
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if status.startswith(("4", "5")):
                    content = response["content"]["application/json"]["schema"]
                    assert content == error_shape, (path, method, status)
            if "requestBody" in operation or operation.get("parameters"):
                assert "422" in operation["responses"], (path, method)
    assert "HTTPValidationError" not in schema["components"]["schemas"]
