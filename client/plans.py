"""Operations as plans: what to send and what to make of the answers, with no I/O.

A plan is a generator. It yields a list of :class:`Request` (sent at once, concurrently when
there are several), receives the list of answers in the same order, and returns its result.
The synchronous and the asynchronous client each run a plan with their own transport
(:mod:`client.transport`), so every operation is written once, here and in
:mod:`client.operations`, and behaves the same in both.

    def lookup_one(doc_id: str) -> Plan[bool]:
        [answer] = yield [Request("POST", "/documents/lookup", json={"ids": [doc_id]})]
        return doc_id in checked(answer).json()["found"]

Answers arrive after the transport's retries (:mod:`client.retry`), whatever their status: a
plan calls :func:`~client.errors.checked` to raise a refusal, or looks at it to work around it.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

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


Plan = Generator[list[Request], list[httpx.Response], T]


def send(request: Request) -> Plan[httpx.Response]:
    """One request; its answer, or :class:`~client.errors.RequestRefused`."""
    [answer] = yield [request]
    return checked(answer)


def in_parallel(plans: Iterable[Plan[T]], width: int) -> Plan[list[T]]:
    """Run ``plans`` with up to ``width`` of them in flight: each step sends the pending
    requests of every running plan together. The results come in the order of ``plans``,
    which is read lazily (a plan is started only when a place frees up)."""
    source = iter(enumerate(plans))
    results: dict[int, T] = {}
    running: list[tuple[int, Plan[T], list[Request]]] = []

    def start_more() -> None:
        while len(running) < max(width, 1):
            entry = next(source, None)
            if entry is None:
                return
            position, plan = entry
            try:
                running.append((position, plan, next(plan)))
            except StopIteration as done:
                results[position] = done.value

    start_more()
    while running:
        answers = yield [request for _, _, requests in running for request in requests]
        still: list[tuple[int, Plan[T], list[Request]]] = []
        offset = 0
        for position, plan, requests in running:
            own = answers[offset : offset + len(requests)]
            offset += len(requests)
            try:
                still.append((position, plan, plan.send(own)))
            except StopIteration as done:
                results[position] = done.value
        running[:] = still
        start_more()
    return [results[position] for position in sorted(results)]
