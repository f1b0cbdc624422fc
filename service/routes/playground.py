"""``GET /ui``: the playground, one self-contained page (no external assets, so it works offline).

The page asks the service itself, from the browser: ``/info`` and ``/collections`` to fill its
pickers, ``GET /search`` once per route (coarse, fine, C2F and auto) to show their hits, routes
and timings side by side, and ``POST /embed`` to draw the query's vector at each trained prefix.
With API keys set, its requests carry the key typed into it; the page itself holds no data and
answers without a key while ``FRACTAL_PUBLIC_PLAYGROUND`` is true.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi.responses import HTMLResponse

from service.routes import new_router, public_when

router = new_router(tags=["playground"])
PAGE = files("service").joinpath("playground.html").read_text(encoding="utf-8")
HEADERS = {
    "Cache-Control": "no-cache",
    # The page's own inline style and script, requests to this service alone, and no framing
    # (the page takes an API key).
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "script-src 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'",
}


@router.get(
    "/ui",
    response_class=HTMLResponse,
    responses={200: {"content": {"text/html": {}}, "description": "the playground page"}},
)
@public_when("public_playground")
async def playground() -> HTMLResponse:
    """The playground: a query searched at every granularity side by side, its embedding drawn
    per prefix (an HTML page for a browser)."""
    return HTMLResponse(PAGE, headers=HEADERS)
