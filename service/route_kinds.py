"""Every route of the service and what it was declared to be (:class:`service.routes.RouteKind`):
the one table the middlewares ask, so that a route declared where it is registered is shed or
opened by construction.

- admission control (:mod:`service.admission`) sheds the routes that encode texts
  (:func:`is_encoding`);
- the API key check (:mod:`service.security`) lets the public routes through while their setting
  is true (:func:`public_paths`).

:data:`ROUTERS` are the service's routers in the order the app includes them (the order of the
OpenAPI document's paths).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fastapi import APIRouter
from fastapi.routing import APIRoute

from service.routes import (
    RouteKind,
    collections,
    documents,
    embed,
    openai_compat,
    playground,
    route_kind,
    search,
    system,
)
from service.settings import Settings

ROUTERS: tuple[APIRouter, ...] = (
    embed.router,
    openai_compat.router,
    documents.router,
    collections.router,
    search.router,
    system.router,
    documents.collection_router,
    playground.router,
)


@dataclass(frozen=True)
class DeclaredRoute:
    """One route: its methods, its path as a template (``/collections/{collection}/documents``,
    as the OpenAPI document writes it) and as a pattern, and its kind."""

    methods: frozenset[str]
    path: str
    pattern: re.Pattern[str]
    kind: RouteKind

    def matches(self, method: str, path: str) -> bool:
        return method in self.methods and self.pattern.fullmatch(path) is not None


ROUTES = tuple(
    DeclaredRoute(
        frozenset(route.methods or ()),
        route.path_format,
        route.path_regex,
        route_kind(route.endpoint),
    )
    for router in ROUTERS
    for route in router.routes
    if isinstance(route, APIRoute)
)
ENCODING_ROUTES = tuple(route for route in ROUTES if route.kind.encodes)
_ENCODING_LITERALS = frozenset(
    (method, route.path)
    for route in ENCODING_ROUTES
    if "{" not in route.path
    for method in route.methods
)
_ENCODING_TEMPLATES = tuple(route for route in ENCODING_ROUTES if "{" in route.path)


def is_encoding(method: str, path: str) -> bool:
    """Whether a request goes to a route declared to encode texts."""
    return (method, path) in _ENCODING_LITERALS or any(
        route.matches(method, path) for route in _ENCODING_TEMPLATES
    )


def public_paths(settings: Settings) -> frozenset[str]:
    """The paths that answer without a key when keys are set: those of the routes declared
    public while their setting is true."""
    return frozenset(
        route.path
        for route in ROUTES
        if route.kind.public_when is not None and getattr(settings, route.kind.public_when)
    )
