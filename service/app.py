"""The FastAPI application: routes, error handlers, request metrics and the runtime's lifecycle.

``create_app(settings)`` loads the runtime (bundle, encoder, index) when the app starts;
``create_app(settings, runtime)`` serves a runtime loaded beforehand (``python -m service``
loads it first, so that a bad bundle ends the process before the server starts). Without
settings, the app reads them from the environment when it starts; it can be built without any
(for the OpenAPI schema).

The OpenAPI schema the app serves states its contract as configured (:mod:`service.openapi`):
the request limits of its settings and of the loaded bundle (:mod:`service.limits`), and the API
key scheme only when keys are set. Without settings it is the contract of the default settings,
which ``openapi/openapi.json`` publishes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from service import openapi
from service.admission import AdmissionMiddleware
from service.errors import install_error_handlers
from service.limits import Limits, LimitsMiddleware
from service.metrics import Metrics, RequestMetricsMiddleware
from service.route_kinds import ROUTERS
from service.runtime import Runtime
from service.security import BodyLimitMiddleware, SecurityMiddleware
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
    for router in ROUTERS:
        # The routes themselves, not FastAPI's inclusion of each router: its per-request
        # matching through the inclusions cost ~40 µs a request. The routers set their own
        # prefixes and tags, so the routes and the OpenAPI document are the same.
        app.router.routes.extend(router.routes)

    app.add_middleware(RequestMetricsMiddleware)
    app.add_middleware(LimitsMiddleware)
    app.add_middleware(BodyLimitMiddleware)
    app.add_middleware(AdmissionMiddleware)
    app.add_middleware(SecurityMiddleware)
    app.add_middleware(DrainGate)  # outermost: decides when a request arrives, before its body
    openapi.install(app)
    return app

