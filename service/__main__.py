"""``python -m service`` / ``fractal-serve``: load everything, then serve with uvicorn.

A bad setting or bundle ends the process before the server starts, with one ``error: …`` line
on stderr and exit status 2. With ``FRACTAL_HUGE_PAGES`` (the default) the process first starts
itself again asking for transparent huge pages (:mod:`service.huge_pages`). SIGTERM drains and
exits with status 0 (:mod:`service.shutdown`).
"""

from __future__ import annotations

import logging
import sys

import uvicorn

from service.app import create_app
from service.errors import StartupError
from service.huge_pages import kernel_mode, requested, restart_with_huge_pages
from service.settings import settings_or_exit
from service.shutdown import serve
from service.startup import load_runtime

EXIT_BAD_CONFIG = 2


def main() -> int:
    settings = settings_or_exit("error", EXIT_BAD_CONFIG)
    if settings.huge_pages:
        restart_with_huge_pages()
    logging.basicConfig(level=settings.log_level.upper(), format="%(levelname)s: %(message)s")
    try:
        runtime = load_runtime(settings)
    except StartupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    logging.getLogger("service").info(
        "transparent huge pages: kernel mode %s, malloc %s",
        kernel_mode() or "absent",
        "asks for them" if requested() else "does not ask",
    )
    config = uvicorn.Config(
        create_app(settings, runtime),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        http=settings.http,
        loop=settings.loop,
        backlog=settings.backlog,
        timeout_keep_alive=settings.keep_alive_s,
        # A GET's request line may be as long as a POST's body (FRACTAL_MAX_BODY_BYTES): a
        # /search filter travels there as URL-encoded JSON. (h11's own limit is 16 KiB, and a
        # longer line was a plain-text 400 from the server, outside the contract.)
        h11_max_incomplete_event_size=settings.max_body_bytes,
        timeout_graceful_shutdown=settings.shutdown_grace_s,  # type: ignore[arg-type]  # a float works
    )
    serve(config, settings.shutdown_grace_s, runtime.drain)
    return 0


if __name__ == "__main__":
    sys.exit(main())
