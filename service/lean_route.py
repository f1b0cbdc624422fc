"""A route that answers a well-formed request without FastAPI's per-request machinery.

FastAPI solves an endpoint's parameters on every request by walking its dependency tree and
each field's annotations, then re-validates the model the endpoint returns before writing it:
about 0.4 ms of a 15K-document ``GET /search`` that otherwise costs 1.1 ms of CPU outside the
encoder. :class:`LeanRoute` plans an endpoint's arguments once, when the route is built, and on
each request:

1. builds them directly: a pydantic model from the query string (``Annotated[M, Query()]``) or
   from a JSON body (a plain model parameter), the :class:`~starlette.requests.Request`, and
   dependencies that need only the request (``Annotated[T, Depends(f)]`` with ``f(request)``,
   a coroutine);
2. calls the endpoint;
3. writes the model it returns once, with its own pydantic serializer (byte for byte what
   FastAPI writes: FastAPI keeps a returned instance of the response model as it is, then
   dumps it with the same serializer, by alias).

Whatever step 1 does not take as it is (a validation error, a repeated or unknown query key, a
body that is not JSON, a dependency that refuses, as ``current_runtime`` does with 503 while
the service is not ready) goes to FastAPI's own handler, which answers it exactly as before:
the error shapes and messages, and the OpenAPI schema (built from the same endpoint), are
FastAPI's. Endpoints with other kinds of parameters (path, header, cookie, form) keep FastAPI's
handler for every request, and so does every route of an app whose settings say
``lean_routes=false`` (``FRACTAL_LEAN_ROUTES``: for comparison, or should the lean path ever be
in doubt).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Annotated, Any, get_args, get_origin, get_type_hints

from fastapi import params
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter
from starlette.requests import Request
from starlette.responses import Response

Handler = Callable[[Request], Coroutine[Any, Any, Response]]
Argument = Callable[[Request], Awaitable[Any]]

JSON_MEDIA_TYPE = "application/json"


class Unplanned(Exception):
    """A request that the lean plan does not take as it is: FastAPI's handler answers it."""


@dataclass(frozen=True)
class ArgumentPlan:
    """How each argument of one endpoint is built from a request."""

    arguments: dict[str, Argument]

    async def build(self, request: Request) -> dict[str, Any]:
        return {name: await make(request) for name, make in self.arguments.items()}


def _query_model(model: type[BaseModel]) -> Argument:
    fields = frozenset(field.alias or name for name, field in model.model_fields.items())

    async def make(request: Request) -> BaseModel:
        pairs = request.query_params.multi_items()
        values = dict(pairs)
        if len(values) != len(pairs) or not fields.issuperset(values):
            raise Unplanned  # repeated or unknown keys: FastAPI's rules decide
        return model.model_validate(values)

    return make


def _body_model(model: type[BaseModel]) -> Argument:
    async def make(request: Request) -> BaseModel:
        media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if media_type != JSON_MEDIA_TYPE:
            raise Unplanned
        body = await request.body()  # kept on the request, for FastAPI's handler if need be
        if not body:
            raise Unplanned
        return model.model_validate(json.loads(body))  # as FastAPI decodes it, then checks it

    return make


async def _the_request(request: Request) -> Request:
    return request


def _dependency(call: Callable[..., Any]) -> Argument | None:
    """``call`` as an argument maker, if it is a coroutine function of the request alone."""
    if not inspect.iscoroutinefunction(call):
        return None
    hints = get_type_hints(call)
    names = list(inspect.signature(call).parameters)
    if len(names) != 1 or hints.get(names[0]) is not Request:
        return None
    return call


def _argument(annotation: Any) -> Argument | None:
    """How to build a parameter of this annotation, or None if the lean path cannot."""
    if annotation is Request:
        return _the_request
    if _is_model(annotation):
        return _body_model(annotation)
    if get_origin(annotation) is not Annotated:
        return None
    base, *metadata = get_args(annotation)
    if len(metadata) != 1:
        return None
    (marker,) = metadata
    if isinstance(marker, params.Depends) and marker.dependency is not None:
        return _dependency(marker.dependency)
    if isinstance(marker, params.Query) and _is_model(base):
        return _query_model(base)
    return None


def argument_plan(endpoint: Callable[..., Any]) -> ArgumentPlan | None:
    """The plan of ``endpoint``'s arguments, or None when one of them is of a kind the lean
    path does not build (then FastAPI's handler serves every request)."""
    if not inspect.iscoroutinefunction(endpoint):
        return None
    hints = get_type_hints(endpoint, include_extras=True)
    arguments: dict[str, Argument] = {}
    bodies = 0
    for name in inspect.signature(endpoint).parameters:
        make = _argument(hints.get(name))
        if make is None:
            return None
        bodies += _is_model(hints[name])
        arguments[name] = make
    return ArgumentPlan(arguments) if bodies <= 1 else None


def _is_model(annotation: Any) -> bool:
    """Whether ``annotation`` is a pydantic model (a plain parameter of one is a JSON body)."""
    return inspect.isclass(annotation) and issubclass(annotation, BaseModel)


class LeanRoute(APIRoute):
    """An :class:`~fastapi.routing.APIRoute` served as the module docstring says."""

    def get_route_handler(self) -> Handler:
        fastapi_handler = super().get_route_handler()
        plan = argument_plan(self.endpoint)
        model = self.response_model
        if plan is None or not (inspect.isclass(model) and issubclass(model, BaseModel)):
            return fastapi_handler
        adapter: TypeAdapter[Any] = TypeAdapter(model)
        status_code = self.status_code or 200
        endpoint = self.endpoint

        async def handler(request: Request) -> Response:
            settings = request.app.state.settings
            if settings is not None and not settings.lean_routes:
                return await fastapi_handler(request)
            try:
                arguments = await plan.build(request)
            except Exception:  # noqa: BLE001 - FastAPI's handler answers it in its own words
                return await fastapi_handler(request)
            result = await endpoint(**arguments)
            if isinstance(result, Response):
                return result
            if type(result) is not model:  # what FastAPI does with anything else
                result = adapter.validate_python(result, from_attributes=True)
            return Response(
                adapter.dump_json(result, by_alias=True),
                status_code=status_code,
                media_type="application/json",
            )

        return handler
