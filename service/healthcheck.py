"""``python -m service.healthcheck [--ready]``: exit 0 when this container's service answers
``/health`` (alive), or with ``--ready`` ``/ready`` (bundle and index loaded: what a load balancer
waits for).

The Docker ``HEALTHCHECK``: reads the same ``FRACTAL_*`` settings as the service, asks
``127.0.0.1:FRACTAL_PORT/health`` or ``/ready`` (with the first API key when they are not
public) and exits 1, with one line on stderr, on any other answer or none within the timeout.
"""

from __future__ import annotations

import argparse
import sys
import urllib.error
import urllib.request

from service.settings import settings_or_exit

TIMEOUT_S = 4.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service.healthcheck")
    parser.add_argument("--ready", action="store_true", help="ask /ready instead of /health")
    path = "/ready" if parser.parse_args(argv).ready else "/health"
    settings = settings_or_exit("unhealthy", 1)
    request = urllib.request.Request(f"http://127.0.0.1:{settings.port}{path}")
    key = settings.any_key() if not settings.public_health else None
    if key is not None:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"unhealthy: {path} answered {status}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
