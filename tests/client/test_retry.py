"""When the client sends a request again: 429 after the service's ``Retry-After`` (bounded), 503
with doubling backoff and only for a request that is safe to send twice."""

from __future__ import annotations

import httpx
import pytest

from client.retry import RetryPolicy


def _answer(status: int, retry_after: str | None = None) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return httpx.Response(status, headers=headers)


def test_429_waits_the_services_retry_after_within_bounds() -> None:
    policy = RetryPolicy(on_429=3, max_wait_s=30.0)
    assert policy.wait_s(_answer(429, "2.5"), 0, resendable=False) == 2.5
    assert policy.wait_s(_answer(429), 0, resendable=False) == 1.0
    assert policy.wait_s(_answer(429, "0"), 0, resendable=False) == 0.05
    assert policy.wait_s(_answer(429, "600"), 0, resendable=False) == 30.0
    assert policy.wait_s(_answer(429, "soon"), 0, resendable=False) == 1.0
    assert policy.wait_s(_answer(429, "1"), 3, resendable=False) is None


def test_503_backs_off_only_for_what_is_safe_to_resend() -> None:
    policy = RetryPolicy(on_503=4, first_backoff_s=0.5)
    waits = [policy.wait_s(_answer(503), attempt, resendable=True) for attempt in range(5)]
    assert waits == [0.5, 1.0, 2.0, 4.0, None]
    assert policy.wait_s(_answer(503, "3"), 0, resendable=True) == 3.0
    assert policy.wait_s(_answer(503), 0, resendable=False) is None


@pytest.mark.parametrize("status", [200, 400, 401, 404, 409, 422, 500, 504])
def test_other_answers_are_final(status: int) -> None:
    assert RetryPolicy().wait_s(_answer(status), 0, resendable=True) is None
