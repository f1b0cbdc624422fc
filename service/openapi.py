"""The service's OpenAPI document: what FastAPI writes from the routes, and every change made to it
after, in one place (:func:`published`).

``python -m service.openapi > openapi/openapi.json`` prints the committed contract: the app's
without settings, so the default settings' limits, no API keys (no security scheme) and no bundle
(its dims, kinds and names described, not enumerated). A running service serves its own at
``/openapi.json``, written for its settings and loaded bundle (:func:`install`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from index.filters import json_schemas
from service.errors import ERROR_DESCRIPTIONS, ERROR_SCHEMA_REF
from service.limits import Limits, limits_bound
from service.route_kinds import public_paths
from service.routes.search import FILTER_SCHEMA_REF
from service.settings import Settings

SCHEME = "apiKey"
UNPARSEABLE_REQUEST = (
    "the request is not HTTP that the server can parse, or is over its parser's limits (a URL "
    "of hundreds of kilobytes, say): uvicorn answers in plain text before the API sees it"
)


def _error(description: str) -> dict[str, Any]:
    schema = {"$ref": ERROR_SCHEMA_REF}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def document_bad_requests(schema: dict) -> dict:
    """``schema`` with the 400 of every operation: the HTTP server's plain-text answer to a
    request it cannot parse, and, for an operation that takes a body, FastAPI's JSON answer to a
    body it cannot decode, before any validation (a body that is not valid JSON is a 422)."""
    for operations in schema["paths"].values():
        for operation in operations.values():
            descriptions = [UNPARSEABLE_REQUEST]
            content: dict = {"text/plain": {"schema": {"type": "string"}}}
            if "requestBody" in operation:
                descriptions.insert(0, ERROR_DESCRIPTIONS[400])
                content["application/json"] = {"schema": {"$ref": ERROR_SCHEMA_REF}}
            operation["responses"]["400"] = {
                "description": "; or ".join(descriptions),
                "content": content,
            }
    return schema


def document_security(schema: dict[str, Any], settings: Settings | None) -> dict[str, Any]:
    """``schema`` with what :mod:`service.security` means for its operations, as configured: a
    413 answer on every operation with a body; and, only when API keys are set, the bearer
    scheme, required by every operation but the public ones (``security: []``), whose 401 and 403
    answers are documented."""
    keys = settings is not None and settings.requires_keys
    public = public_paths(settings) if settings is not None else frozenset()
    if keys:
        schema["components"]["securitySchemes"] = {
            SCHEME: {
                "type": "http",
                "scheme": "bearer",
                "description": "One of FRACTAL_API_KEYS, or of FRACTAL_API_KEYS_FILE (scoped: "
                "a key outside its scope gets 403). /health and /ready "
                "(FRACTAL_PUBLIC_HEALTH) and /metrics (FRACTAL_PUBLIC_METRICS) are open by "
                "default.",
            }
        }
        schema["security"] = [{SCHEME: []}]
    for path, operations in schema["paths"].items():
        for operation in operations.values():
            responses = operation["responses"]
            if keys and path in public:
                operation["security"] = []
            elif keys:
                responses["401"] = _error("missing or invalid API key (FRACTAL_API_KEYS)")
                responses["403"] = _error(
                    "the key's scope (FRACTAL_API_KEYS_FILE) does not allow this operation on "
                    "this collection"
                )
            if "requestBody" in operation:
                responses["413"] = _error("the body is over FRACTAL_MAX_BODY_BYTES")
    return schema


def document_filters(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with the filter grammar (:func:`index.filters.json_schemas`) as components,
    referred to by ``POST /search``'s ``filter`` and, as JSON content, by ``GET /search``'s
    ``filter`` query parameter."""
    schema.setdefault("components", {}).setdefault("schemas", {}).update(
        json_schemas(FILTER_SCHEMA_REF.removesuffix("MetadataFilter"))
    )
    for parameter in schema["paths"]["/search"]["get"].get("parameters", []):
        if parameter["name"] == "filter":
            description = parameter.get("description") or parameter["schema"].get("description")
            parameter.pop("schema")
            parameter["content"] = {"application/json": {"schema": {"$ref": FILTER_SCHEMA_REF}}}
            if description:
                parameter["description"] = description
    return schema


def published(
    generate: Callable[[], dict[str, Any]], limits: Limits, settings: Settings | None
) -> dict[str, Any]:
    """The document for ``limits`` and ``settings``: FastAPI's (``generate``), written with those
    limits (:mod:`service.limits`), then every change above."""
    with limits_bound(limits):
        schema = generate()
        schema = document_security(document_bad_requests(schema), settings)
        return document_filters(schema)


def install(app: FastAPI) -> None:
    """Make ``app.openapi`` serve :func:`published` for the app's limits and settings as they are
    now (the bundle loads when the app starts): built again when they change."""
    generate = app.openapi
    built: list[Any] = [None, None, None]  # limits, settings, schema

    def openapi() -> dict[str, Any]:
        limits, settings = app.state.limits, app.state.settings
        if built[0] is not limits or built[1] is not settings:
            app.openapi_schema = None
            built[:] = [limits, settings, published(generate, limits, settings)]
        return built[2]

    app.openapi = openapi  # type: ignore[method-assign]


def schema_text() -> str:
    """The schema as committed: pretty-printed, keys in the app's order, newline-terminated."""
    from service.app import create_app  # here, not above: the app installs this module's hook

    return json.dumps(create_app().openapi(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    print(schema_text(), end="")
