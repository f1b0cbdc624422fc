"""Print the service's OpenAPI schema: ``python -m service.openapi > openapi/openapi.json``.

The committed contract is the app's without settings: the default settings' limits, no API keys
(so no security scheme), and no bundle (its dims, kinds and names described, not enumerated).
A running service serves its own at ``/openapi.json`` (:mod:`service.app`)."""

from __future__ import annotations

import json

from service.app import create_app


def schema_text() -> str:
    """The schema as committed: pretty-printed, keys in the app's order, newline-terminated."""
    return json.dumps(create_app().openapi(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    print(schema_text(), end="")
