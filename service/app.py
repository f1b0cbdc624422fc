"""The FastAPI application: routes, error handlers, request metrics and the runtime's lifecycle.

``create_app(settings)`` loads the runtime (bundle, encoder, index) when the app starts;
``create_app(settings, runtime)`` serves a runtime loaded beforehand (``python -m service``
loads it first, so that a bad bundle ends the process before the server starts). Without
settings, the app reads them from the environment when it starts; it can be built without any
(for the OpenAPI schema).

The OpenAPI schema the app serves states its contract as configured: the request limits of its
settings and of the loaded bundle (:mod:`service.limits`), and the API key scheme only when keys
are set (:func:`service.security.document_security`). Without settings it is the contract of
the default settings, which ``openapi/openapi.json`` publishes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from service.admission import AdmissionMiddleware
from service.errors import document_bad_requests, install_error_handlers
from service.limits import Limits, LimitsMiddleware, limits_bound
from service.metrics import Metrics, RequestMetricsMiddleware
from service.routes import collections, documents, embed, openai_compat, search, system
from service.runtime import Runtime
from service.security import BodyLimitMiddleware, SecurityMiddleware, document_security
from service.settings import Settings
from service.shutdown import DrainGate
from service.startup import load_runtime

TITLE = "Fractal"
VERSION = "0.1.0"
DESCRIPTION = (
    "Text embeddings whose prefixes mean something: coarse (domain) meaning in the first "
    "dimensions, fine (intent) meaning in the full vector. Embeddings at several resolutions, "
    "an OpenAI-compatible endpoint, and search over stored documents at the coarse or fine "
    "resolution, coarse-to-fine, or chosen per query. Every error answer has the shape "
    '{"error": {"type", "message", "param"}}.'
)


def create_app(settings: Settings | None = None, runtime: Runtime | None = None) -> FastAPI:
    """The service; see the module docstring for when the runtime is loaded."""
    metrics = runtime.metrics if runtime is not None else Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loaded = runtime or load_runtime(settings or Settings(), metrics)
        loaded.start()
        app.state.settings = loaded.settings
        app.state.limits = loaded.limits
        app.state.runtime = loaded
        try:
            yield
        finally:
            await loaded.stop()
            app.state.runtime = None

    app = FastAPI(title=TITLE, version=VERSION, description=DESCRIPTION, lifespan=lifespan)
    app.state.runtime = None
    app.state.settings = settings or (runtime.settings if runtime is not None else None)
    app.state.limits = runtime.limits if runtime is not None else Limits.of(settings)
    app.state.metrics = metrics
    install_error_handlers(app)
    for module in (embed, openai_compat, documents, collections, search, system):
        app.include_router(module.router)
    app.include_router(documents.collection_router)

    app.add_middleware(RequestMetricsMiddleware)
    app.add_middleware(LimitsMiddleware)
    app.add_middleware(BodyLimitMiddleware)
    app.add_middleware(AdmissionMiddleware)
    app.add_middleware(SecurityMiddleware)
    app.add_middleware(DrainGate)  # outermost: decides when a request arrives, before its body
    app.openapi = _contract(app)  # type: ignore[method-assign]
    return app


def _contract(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """``app.openapi`` for the app's limits and settings as they are now (the bundle loads when
    the app starts); built again when they change."""
    build = app.openapi
    built: list[Any] = [None, None, None]  # limits, settings, schema

    def openapi() -> dict[str, Any]:
        limits, settings = app.state.limits, app.state.settings
        if built[0] is not limits or built[1] is not settings:
            app.openapi_schema = None
            with limits_bound(limits):
                schema = document_security(document_bad_requests(build()), settings)
                schema = search.document_filters(schema)
                built[:] = [limits, settings, schema]
        return built[2]

    return openapi
