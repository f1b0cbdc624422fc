"""The one error shape of the API, the exceptions the service raises, and their handlers.

Every 4xx and 5xx answer has the body ``{"error": {"type", "message", "param"}}`` (the shape the
OpenAI clients read): the service's own errors, FastAPI's validation errors (bad JSON included),
Starlette's 404/405, a stored document that fails its checksum (500 ``data_corrupt``, naming the
document), and anything unexpected (500, with no detail leaked).
"""

from __future__ import annotations

import logging
import re
from typing import ClassVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from index.backend import BackendUnavailable, RowCorrupt, StorageFull
from service.limits import RULE_ERROR

logger = logging.getLogger("service")

MAX_LISTED_PROBLEMS = 5


class ServiceError(Exception):
    """An error the client is told about: HTTP status, error type, message, offending field."""

    status: ClassVar[int] = 500
    kind: ClassVar[str] = "internal_error"

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def headers(self) -> dict[str, str]:
        return {}


class InvalidRequest(ServiceError):
    """Input the service will not process: a limit, an unknown mode or dimension, bad text."""

    status = 422
    kind = "invalid_request"


class NotFound(ServiceError):
    status = 404
    kind = "not_found"


class Conflict(ServiceError):
    """The request would create what already exists (a collection name)."""

    status = 409
    kind = "conflict"


class ModelNotFound(NotFound):
    """The OpenAI endpoint was asked for a model other than the bundle served."""

    kind = "model_not_found"


class Overloaded(ServiceError):
    """The service cannot take the request in time (the encoder queue is full, its estimated wait
    is too long, or too many requests are in progress); the client should retry after
    ``retry_after_s`` seconds."""

    status = 429
    kind = "overloaded"

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class DeadlineExceeded(ServiceError):
    """The request's texts were still queued for the encoder when its deadline passed; they
    were dropped without being encoded."""

    status = 504
    kind = "deadline_exceeded"


class ClientDisconnected(ServiceError):
    """The client disconnected while its texts waited for the encoder; they are dropped. The
    answer goes nowhere: its status (nginx's 499) labels the request in the metrics."""

    status = 499
    kind = "client_disconnected"


class NotReady(ServiceError):
    """The bundle and index are not loaded (starting up or shutting down)."""

    status = 503
    kind = "not_ready"


class ShuttingDown(NotReady):
    """SIGTERM was received: requests in flight finish, new ones are refused, and the connection
    is closed after the answer (a client reconnects, to another replica behind a balancer)."""

    def headers(self) -> dict[str, str]:
        return {"Connection": "close"}


class StartupError(Exception):
    """The service cannot start; the message is printed as the one line the process ends with."""


class ErrorBody(BaseModel):
    type: str
    message: str
    param: str | None = None


class ErrorResponse(BaseModel):
    """The body of every 4xx and 5xx answer."""

    error: ErrorBody


ERROR_SCHEMA_REF = "#/components/schemas/ErrorResponse"


ERROR_DESCRIPTIONS = {
    400: "the body cannot be read as JSON text (it is not UTF-8)",
    404: "not found: the message names the document, collection or model",
    409: "conflict: the message names what already exists",
    422: "invalid input: the message says which field and what the limit is",
    429: "overloaded: the encoder queue is full or its estimated wait is over "
    "FRACTAL_QUEUE_DEADLINE_MS (refused before the body is read), or FRACTAL_LIMIT_CONCURRENCY "
    "encoding requests are in progress; retry after the Retry-After header's seconds",
    503: "not ready: the bundle and index are not loaded (starting or stopping), or the index "
    "backend's server (Milvus) cannot be reached (then with a Retry-After header)",
    504: "deadline exceeded: the texts were still queued for the encoder "
    "FRACTAL_REQUEST_TIMEOUT_MS after the request arrived, and were dropped unencoded",
    507: "insufficient storage: the disk holding FRACTAL_INDEX_DIR is full; nothing of this "
    "request was stored (retry once space is freed)",
}

STORAGE_FULL_MESSAGE = (
    "the disk holding the index directory (FRACTAL_INDEX_DIR) is full: nothing of this request "
    "was stored; retry once space is freed"
)


def error_responses(*statuses: int) -> dict[int | str, dict]:
    """The OpenAPI ``responses`` entry of an endpoint that can answer these error statuses."""
    return {
        status: {"model": ErrorResponse, "description": ERROR_DESCRIPTIONS[status]}
        for status in statuses
    }


def error_response(
    request: Request,
    status: int,
    kind: str,
    message: str,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """The JSON error answer; counts it in the app's ``errors`` metric."""
    request.app.state.metrics.errors.labels(kind=kind).inc()
    body = ErrorResponse(error=ErrorBody(type=kind, message=message, param=param))
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


REQUEST_PARTS = ("body", "query", "path", "header")


def _location(loc: tuple) -> str:
    """``("body", "texts", 0)`` → ``"texts.0"``: the field, as the client named it."""
    parts = loc[1:] if loc and loc[0] in REQUEST_PARTS else loc
    return ".".join(str(part) for part in parts) or "body"


def _field(problem: dict) -> str:
    """The field a problem is about; a broken rule may name a part of it (``input.3``)."""
    location = _location(problem["loc"])
    if problem.get("type") == RULE_ERROR:
        return location + problem.get("ctx", {}).get("at", "")
    return location


def _describe_validation(error: RequestValidationError) -> tuple[str, str | None]:
    problems = error.errors()
    messages = []
    for problem in problems[:MAX_LISTED_PROBLEMS]:
        if problem.get("type") == "json_invalid":
            reason = problem.get("ctx", {}).get("error", "")
            messages.append(f"the body is not valid JSON ({reason})")
        elif problem.get("type") == RULE_ERROR:  # "texts.1 has 9000 characters; the limit …"
            messages.append(f"{_field(problem)} {problem['msg']}")
        else:
            messages.append(f"{_field(problem)}: {problem['msg']}")
    if len(problems) > MAX_LISTED_PROBLEMS:
        messages.append(f"and {len(problems) - MAX_LISTED_PROBLEMS} more problems")
    first = problems[0] if problems else None
    param = _field(first) if first and first.get("type") != "json_invalid" else None
    return "; ".join(messages) or "invalid request", param


_HTTP_KINDS = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed"}


PATH_PARAMETERS = {"doc_id", "model"}
"""The path parameters that may hold ``/`` (``/documents/{doc_id:path}``,
``/v1/models/{model:path}``); others hold one segment."""


def _path_pattern(template: str) -> re.Pattern[str]:
    """An OpenAPI path template as a regular expression: a parameter is one segment, but a
    document id may hold ``/``."""
    parts = re.split(r"\{([^}]*)\}", template)
    pattern = "".join(
        re.escape(part) if position % 2 == 0 else (".+" if part in PATH_PARAMETERS else "[^/]+")
        for position, part in enumerate(parts)
    )
    return re.compile(pattern)


def allowed_methods(request: Request) -> str | None:
    """The ``Allow`` header of a 405: the methods the app's OpenAPI schema declares for the
    request's path. As OpenAPI matches paths, a path without parameters goes before templated
    ones, and among templates the most literal ones win (``/documents/vectors``: POST;
    ``/documents/a-id``: DELETE, GET; ``/collections/c/documents/vectors``: POST). None for a
    path the schema does not have. (Starlette names the methods of the first route whose path
    matched, which missed DELETE on ``/documents/{doc_id}``.)"""
    paths: dict[str, dict] = request.app.openapi()["paths"]
    path = request.scope["path"]
    if path in paths:
        methods = set(paths[path])
    else:
        matched = [
            template
            for template in paths
            if "{" in template and _path_pattern(template).fullmatch(path)
        ]

        def literal(template: str) -> int:
            return len(re.sub(r"\{[^}]*\}", "", template))

        best = max(map(literal, matched), default=0)
        methods = {
            method
            for template in matched
            if literal(template) == best
            for method in paths[template]
        }
    return ", ".join(sorted(method.upper() for method in methods)) or None


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error in the one JSON shape."""

    async def on_service_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ServiceError)
        return error_response(
            request, exc.status, exc.kind, exc.message, exc.param, exc.headers() or None
        )

    async def on_validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        message, param = _describe_validation(exc)
        return error_response(request, 422, "invalid_request", message, param)

    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        kind = _HTTP_KINDS.get(exc.status_code, "http_error")
        headers = exc.headers
        allowed = allowed_methods(request) if exc.status_code == 405 else None
        if allowed is not None:
            headers = {**(headers or {}), "Allow": allowed}
        return error_response(
            request, exc.status_code, kind, str(exc.detail), headers=dict(headers or {}) or None
        )

    async def on_unexpected_error(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_response(request, 500, "internal_error", "internal server error")

    async def on_backend_unavailable(request: Request, exc: Exception) -> JSONResponse:
        return error_response(
            request, 503, "backend_unavailable", str(exc), headers={"Retry-After": "1"}
        )

    async def on_storage_full(request: Request, exc: Exception) -> JSONResponse:
        logger.warning("%s %s refused: %s", request.method, request.url.path, exc)
        return error_response(request, 507, "insufficient_storage", STORAGE_FULL_MESSAGE)

    async def on_row_corrupt(request: Request, exc: Exception) -> JSONResponse:
        logger.error("%s %s failed: %s", request.method, request.url.path, exc)
        return error_response(request, 500, "data_corrupt", str(exc))

    app.add_exception_handler(ServiceError, on_service_error)
    app.add_exception_handler(RowCorrupt, on_row_corrupt)
    app.add_exception_handler(BackendUnavailable, on_backend_unavailable)
    app.add_exception_handler(StorageFull, on_storage_full)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(HTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unexpected_error)
