"""When a request is sent again: 429 after the service's ``Retry-After``, 503 with backoff.

The service answers 429 when its queue for the request's lane is full, with a ``Retry-After``
it computed from the queue's drain rate; it answers 503 while it starts, drains or loses its
index backend. Both refusals mean that nothing was done. A 503 is retried only for a request
that is safe to send twice (a read, or a write naming every document's id): a write that lets
the service pick ids could otherwise store a document twice if a first attempt got further
than its answer says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import httpx

RETRIES_ON_429 = 20
RETRIES_ON_503 = 5
MAX_RETRY_WAIT_S = 30.0
FIRST_BACKOFF_S = 0.5
"""The wait before the first resend after a 503 without ``Retry-After``; doubled each time."""


@dataclass(frozen=True)
class RetryPolicy:
    """How many times a refusal is retried, and how long a wait may last."""

    on_429: int = RETRIES_ON_429
    on_503: int = RETRIES_ON_503
    max_wait_s: float = MAX_RETRY_WAIT_S
    first_backoff_s: float = FIRST_BACKOFF_S

    def wait_s(
        self, response: httpx.Response, retried: dict[int, int], resendable: bool
    ) -> float | None:
        """Seconds to wait before sending the request again after ``response``; None:
        ``response`` is final. ``retried`` counts the request's retries so far by status (429
        and 503 each have their own bound and backoff); a retry granted is counted in it."""
        status = response.status_code
        attempt = retried.get(status, 0)
        if status == 429 and attempt < self.on_429:
            wait = _retry_after(response, default=1.0)
        elif status == 503 and resendable and attempt < self.on_503:
            wait = max(_retry_after(response, 0.0), self.first_backoff_s * 2**attempt)
        else:
            return None
        retried[status] = attempt + 1
        return min(max(wait, 0.05), self.max_wait_s)


def _retry_after(response: httpx.Response, default: float) -> float:
    """The ``Retry-After`` header in seconds (``default`` when absent or not a number)."""
    try:
        seconds = float(response.headers.get("Retry-After", default))
    except ValueError:
        return default
    return seconds if math.isfinite(seconds) else default
