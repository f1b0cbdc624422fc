"""The one error shape of the API, the exceptions the service raises, and their handlers.

Every 4xx and 5xx answer has the body ``{"error": {"type", "message", "param"}}`` (the shape the
OpenAI clients read): the service's own errors, FastAPI's validation errors (bad JSON included),
Starlette's 404/405, and anything unexpected (500, with no detail leaked).
"""

from __future__ import annotations

import logging
from typing import ClassVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

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
    """The encoder queue is full; the client should retry after ``retry_after_s`` seconds."""

    status = 429
    kind = "overloaded"

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class NotReady(ServiceError):
    """The bundle and index are not loaded (starting up or shutting down)."""

    status = 503
    kind = "not_ready"


class StartupError(Exception):
    """The service cannot start; the message is printed as the one line the process ends with."""


class ErrorBody(BaseModel):
    type: str
    message: str
    param: str | None = None


class ErrorResponse(BaseModel):
    """The body of every 4xx and 5xx answer."""

    error: ErrorBody


_ERROR_DESCRIPTIONS = {
    404: "not found: the message names the document, collection or model",
    409: "conflict: the message names what already exists",
    422: "invalid input: the message says which field and what the limit is",
    429: "the encoder queue is full; retry after the Retry-After header's seconds",
    503: "the bundle and index are not loaded (starting or stopping)",
}


def error_responses(*statuses: int) -> dict[int | str, dict]:
    """The OpenAPI ``responses`` entry of an endpoint that can answer these error statuses."""
    return {
        status: {"model": ErrorResponse, "description": _ERROR_DESCRIPTIONS[status]}
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


def _describe_validation(error: RequestValidationError) -> tuple[str, str | None]:
    problems = error.errors()
    messages = []
    for problem in problems[:MAX_LISTED_PROBLEMS]:
        if problem.get("type") == "json_invalid":
            reason = problem.get("ctx", {}).get("error", "")
            messages.append(f"the body is not valid JSON ({reason})")
        else:
            messages.append(f"{_location(problem['loc'])}: {problem['msg']}")
    if len(problems) > MAX_LISTED_PROBLEMS:
        messages.append(f"and {len(problems) - MAX_LISTED_PROBLEMS} more problems")
    first = problems[0] if problems else None
    param = _location(first["loc"]) if first and first.get("type") != "json_invalid" else None
    return "; ".join(messages) or "invalid request", param


_HTTP_KINDS = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed"}


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
        return error_response(request, exc.status_code, kind, str(exc.detail), headers=exc.headers)

    async def on_unexpected_error(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_response(request, 500, "internal_error", "internal server error")

    app.add_exception_handler(ServiceError, on_service_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(HTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unexpected_error)
