"""When the client sends a request again: 429 after the service's ``Retry-After`` (bounded), 503
with doubling backoff and only for a request that is safe to send twice; each status counts
its own retries."""

from __future__ import annotations

import httpx
import pytest

from client.operations import _names_every_id
from client.retry import RetryPolicy


def _answer(status: int, retry_after: str | None = None) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return httpx.Response(status, headers=headers)


def test_429_waits_the_services_retry_after_within_bounds() -> None:
    policy = RetryPolicy(on_429=3, max_wait_s=30.0)
    assert policy.wait_s(_answer(429, "2.5"), {}, resendable=False) == 2.5
    assert policy.wait_s(_answer(429), {}, resendable=False) == 1.0
    assert policy.wait_s(_answer(429, "0"), {}, resendable=False) == 0.05
    assert policy.wait_s(_answer(429, "600"), {}, resendable=False) == 30.0
    assert policy.wait_s(_answer(429, "soon"), {}, resendable=False) == 1.0
    assert policy.wait_s(_answer(429, "nan"), {}, resendable=False) == 1.0
    assert policy.wait_s(_answer(429, "1"), {429: 3}, resendable=False) is None


def test_503_backs_off_only_for_what_is_safe_to_resend() -> None:
    policy = RetryPolicy(on_503=4, first_backoff_s=0.5)
    retried: dict[int, int] = {}
    waits = [policy.wait_s(_answer(503), retried, resendable=True) for _ in range(5)]
    assert waits == [0.5, 1.0, 2.0, 4.0, None]
    assert retried == {503: 4}
    assert policy.wait_s(_answer(503, "3"), {}, resendable=True) == 3.0
    assert policy.wait_s(_answer(503), {}, resendable=False) is None


def test_each_status_has_its_own_bound_and_backoff() -> None:
    policy = RetryPolicy(on_429=20, on_503=5, first_backoff_s=0.5)
    retried: dict[int, int] = {}
    for _ in range(6):
        assert policy.wait_s(_answer(429, "0.1"), retried, resendable=True) == 0.1
    assert policy.wait_s(_answer(503), retried, resendable=True) == 0.5
    assert retried == {429: 6, 503: 1}


@pytest.mark.parametrize("status", [200, 400, 401, 404, 409, 422, 500, 504])
def test_other_answers_are_final(status: int) -> None:
    assert RetryPolicy().wait_s(_answer(status), {}, resendable=True) is None


def test_a_write_is_resendable_only_when_every_document_names_its_id() -> None:
    assert _names_every_id([{"id": "a", "text": "x"}, {"id": "b", "text": "y"}])
    assert not _names_every_id([{"id": "a", "text": "x"}, {"text": "y"}])
    assert not _names_every_id([{"id": None, "text": "x"}])
