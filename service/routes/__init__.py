"""HTTP routes, one module per resource, each with the pydantic schemas it uses; and what a route
is, declared on its endpoint where it is registered (:func:`encodes_texts`, :func:`public_when`)
and read by the middlewares through :mod:`service.route_kinds`."""

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict

from service.lean_route import LeanRoute

JSON_BODY = ConfigDict(extra="forbid", strict=True)
"""A JSON body's model: its own fields only, each of the JSON type its schema states (strict:
``"5"`` is not an integer, ``0`` not a boolean), so that it accepts what the schema says."""


def new_router(**options: Any) -> APIRouter:
    """A router of the service: its routes answer well-formed requests on the lean path
    (:class:`service.lean_route.LeanRoute`)."""
    return APIRouter(route_class=LeanRoute, **options)


class FromAttributes(BaseModel):
    """A response model built from an object's attributes: ``Model.model_validate(obj)``."""

    model_config = ConfigDict(from_attributes=True)


PublicSetting = Literal["public_health", "public_metrics", "public_playground"]


@dataclass(frozen=True)
class RouteKind:
    """What a route is; the default is a route that encodes nothing and needs an API key."""

    encodes: bool = False
    """It encodes texts: admission control (:mod:`service.admission`) sheds it when the encoder
    queue cannot serve it in time."""
    public_when: PublicSetting | None = None
    """The setting that, while true, opens it without an API key (:mod:`service.security`)."""


Endpoint = TypeVar("Endpoint", bound=Callable)
_KIND = "route_kind"


def encodes_texts(endpoint: Endpoint) -> Endpoint:
    """Declare a route that encodes texts; put it under the route's ``@router`` decorator."""
    setattr(endpoint, _KIND, replace(route_kind(endpoint), encodes=True))
    return endpoint


def public_when(setting: PublicSetting) -> Callable[[Endpoint], Endpoint]:
    """Declare a route open without an API key while ``setting`` is true; put it under the
    route's ``@router`` decorator."""

    def declare(endpoint: Endpoint) -> Endpoint:
        setattr(endpoint, _KIND, replace(route_kind(endpoint), public_when=setting))
        return endpoint

    return declare


def route_kind(endpoint: Callable) -> RouteKind:
    """What ``endpoint``'s route was declared to be (the default kind when it was not)."""
    return getattr(endpoint, _KIND, RouteKind())
