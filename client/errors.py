"""The one exception the client raises for a refusal: the service's status, message and param."""

from __future__ import annotations

import re

import httpx


class RequestRefused(RuntimeError):
    """The service answered a request with an error status (after any retries).

    ``status_code``, ``message`` and ``param`` come from the service's error body
    (``{"error": {"message", "param", …}}``); ``param`` names the field at fault, such as
    ``documents.3.text`` or ``filter.and[1].gte``.

    ``stored_ids``: when the refusal stopped ``add_documents``, the documents the service
    acknowledged before it, as {position in the documents: id} (a transport error that stops
    it carries the same attribute)."""

    def __init__(self, response: httpx.Response) -> None:
        self.stored_ids: dict[int, str] = {}
        self.status_code = response.status_code
        self.message, self.param = _error_of(response)
        super().__init__(
            f"{response.request.method} {response.request.url.path} was refused: "
            f"{response.status_code} {response.text[:300]}"
        )

    def position(self, field: str) -> int | None:
        """The item of the body's list ``field`` the refusal names (its ``param`` is
        ``field.N`` or ``field.N.…``), or None."""
        found = re.fullmatch(rf"{re.escape(field)}\.(\d+)(?:\..*)?", self.param or "")
        return None if found is None else int(found.group(1))


def _error_of(response: httpx.Response) -> tuple[str, str | None]:
    """The message and param of the service's error body (the raw text when it has none)."""
    try:
        error = response.json()["error"]
        return str(error["message"]), error.get("param")
    except (ValueError, KeyError, TypeError):
        return response.text[:300], None


def checked(response: httpx.Response) -> httpx.Response:
    """``response`` itself when its status is below 400; :class:`RequestRefused` otherwise."""
    if response.status_code >= 400:
        raise RequestRefused(response)
    return response
