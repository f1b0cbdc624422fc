"""What each route is declared to be (:mod:`service.route_kinds`): every route that takes texts to
encode is declared so, and so shed by admission control; the public routes are those of the
settings."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, get_args, get_origin

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from pydantic import BaseModel

from service.admission import encodes
from service.app import create_app
from service.limits import DocumentIdRule, FullVector, OpenAIInputRule, TextRule
from service.route_kinds import ENCODING_ROUTES, ROUTERS, ROUTES, public_paths
from service.settings import Settings


def _is_text_to_encode(rule: object) -> bool:
    return isinstance(rule, TextRule | OpenAIInputRule) and not isinstance(rule, DocumentIdRule)


def _takes_texts(annotation: Any, metadata: list[Any] | tuple[Any, ...] = ()) -> bool:
    """Whether a value of this type holds a text to encode: a field with a text rule of
    :mod:`service.limits` (not a document id), except in a model whose texts come with their
    vectors (a :class:`FullVector` field: stored, not encoded)."""
    if any(_is_text_to_encode(rule) for rule in metadata):
        return True
    if get_origin(annotation) is Annotated:
        inner, *rules = get_args(annotation)
        return _takes_texts(inner, rules)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        fields = annotation.model_fields.values()
        if any(isinstance(rule, FullVector) for field in fields for rule in field.metadata):
            return False
        return any(_takes_texts(field.annotation, field.metadata) for field in fields)
    return any(_takes_texts(argument) for argument in get_args(annotation))


def _parameters(dependant: Dependant) -> Iterator[Any]:
    """Every parameter a route reads from the request, its dependencies' included."""
    yield from dependant.path_params
    yield from dependant.query_params
    yield from dependant.header_params
    yield from dependant.cookie_params
    yield from dependant.body_params
    for dependency in dependant.dependencies:
        yield from _parameters(dependency)


def _operations(routes: Any) -> set[tuple[str, str]]:
    return {(method, route.path_format) for route in routes for method in route.methods}


def _api_routes() -> list[APIRoute]:
    return [route for router in ROUTERS for route in router.routes if isinstance(route, APIRoute)]


def test_the_table_has_every_operation_the_app_serves() -> None:
    served = {
        (method.upper(), path)
        for path, operations in create_app().openapi()["paths"].items()
        for method in operations
    }
    assert {(method, route.path) for route in ROUTES for method in route.methods} == served


def test_every_route_that_takes_texts_to_encode_is_declared_encoding() -> None:
    taking_texts = [
        route
        for route in _api_routes()
        if any(
            _takes_texts(parameter.field_info.annotation, parameter.field_info.metadata)
            for parameter in _parameters(route.dependant)
        )
    ]
    assert _operations(taking_texts) == {
        (method, route.path) for route in ENCODING_ROUTES for method in route.methods
    }
    assert _operations(taking_texts) == {
        ("POST", "/embed"),
        ("POST", "/v1/embeddings"),
        ("POST", "/documents"),
        ("POST", "/collections/{collection}/documents"),
        ("GET", "/search"),
        ("POST", "/search"),
    }


def test_admission_control_sheds_exactly_the_declared_encoding_routes() -> None:
    for route in ROUTES:
        path = route.path.replace("{collection}", "notes").replace("{doc_id}", "a/b")
        path = path.replace("{name}", "notes")
        for method in route.methods:
            assert encodes({"method": method, "path": path}) is route.kind.encodes, (method, path)


def test_the_public_routes_follow_their_settings() -> None:
    def public(**settings: bool) -> frozenset[str]:
        return public_paths(Settings.model_construct(**settings))

    assert public() == {"/health", "/ready", "/metrics", "/ui"}
    assert public(public_health=False) == {"/metrics", "/ui"}
    assert public(public_metrics=False) == {"/health", "/ready", "/ui"}
    assert public(public_playground=False) == {"/health", "/ready", "/metrics"}
    closed = {"public_health": False, "public_metrics": False, "public_playground": False}
    assert public(**closed) == frozenset()
