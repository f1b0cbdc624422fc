"""Operations as plans: what to send and what to make of the answers, with no I/O.

A plan is a generator. Each step it yields either a list of :class:`Request` (sent at once,
concurrently when there are several) and receives the list of answers in the same order, or a
:class:`Fanout` of other plans (see :func:`in_parallel`) and receives their results. It returns
its result. The synchronous and the asynchronous client each run a plan with their own transport
(:mod:`client.transport`), so every operation is written once, here and in
:mod:`client.operations`, and behaves the same in both.

    def lookup_one(doc_id: str) -> Plan[bool]:
        [answer] = yield [Request("POST", "/documents/lookup", json={"ids": [doc_id]})]
        return doc_id in checked(answer).json()["found"]

Answers arrive after the transport's retries (:mod:`client.retry`), whatever their status: a
plan calls :func:`~client.errors.checked` to raise a refusal, or looks at it to work around it.
An error while sending (a refused connection, a timeout) is raised inside the plan, at its
``yield``, so that its ``with`` and ``finally`` blocks run.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx

from client.errors import checked

T = TypeVar("T")


@dataclass(frozen=True)
class Request:
    """One HTTP request of a plan. ``resendable``: sending it twice does no harm, so a 503
    may be retried (see :mod:`client.retry`)."""

    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    resendable: bool = True


@dataclass(frozen=True)
class Fanout(Generic[T]):
    """A step that runs other plans, up to ``width`` of them at once; the transport answers it
    with their results in the order of ``plans`` (see :func:`in_parallel`)."""

    plans: Iterable[Generator[Any, Any, T]]
    width: int


Step = list[Request] | Fanout[Any]
Plan = Generator[Step, Any, T]
"""A plan that returns a ``T``: it yields steps and receives their answers (a list of
:class:`httpx.Response` for a list of requests, a list of results for a :class:`Fanout`)."""


def send(request: Request) -> Plan[httpx.Response]:
    """One request; its answer, or :class:`~client.errors.RequestRefused`."""
    [answer] = yield [request]
    return checked(answer)


def in_parallel(plans: Iterable[Plan[T]], width: int) -> Plan[list[T]]:
    """Run ``plans`` with up to ``width`` of them in flight, each at its own pace: a plan is
    started (``plans`` is read lazily) as soon as another ends. Their results, in the order of
    ``plans``. When one raises (or reading ``plans`` does), no plan is started after it, those
    running are run to their end, and the first error is raised."""
    results: list[T] = yield Fanout(plans, max(width, 1))
    return results
