"""Plans run without I/O: a plan driven by hand sees what it asked for, and
:func:`client.plans.in_parallel` keeps its width, its order and reads its plans lazily."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from client.errors import RequestRefused, checked
from client.plans import Plan, Request, in_parallel, send


def _answer(request: Request, status: int = 200) -> httpx.Response:
    http_request = httpx.Request(request.method, f"http://service{request.path}")
    return httpx.Response(status, json={"path": request.path}, request=http_request)


def _drive(plan: Plan, status_of=lambda request: 200) -> tuple[object, list[list[Request]]]:
    """Run ``plan`` answering each request with its path; the result and every step."""
    steps: list[list[Request]] = []
    try:
        requests = next(plan)
        while True:
            steps.append(requests)
            requests = plan.send([_answer(r, status_of(r)) for r in requests])
    except StopIteration as done:
        return done.value, steps


def _drive_rest(plan: Plan, answers: list[httpx.Response]) -> tuple[object, int]:
    """Send ``answers`` to a started plan, then answer the rest as :func:`_drive` does."""
    steps = 0
    try:
        requests = plan.send(answers)
        while True:
            steps += 1
            requests = plan.send([_answer(request) for request in requests])
    except StopIteration as done:
        return done.value, steps


def _two_requests(name: str) -> Plan[str]:
    first = yield from send(Request("GET", f"/{name}/1"))
    second = yield from send(Request("GET", f"/{name}/2"))
    return first.json()["path"] + second.json()["path"]


def test_in_parallel_sends_the_running_plans_together_and_keeps_their_order() -> None:
    result, steps = _drive(in_parallel((_two_requests(name) for name in "abc"), width=2))
    assert result == ["/a/1/a/2", "/b/1/b/2", "/c/1/c/2"]
    assert [[r.path for r in step] for step in steps] == [
        ["/a/1", "/b/1"],
        ["/a/2", "/b/2"],
        ["/c/1"],
        ["/c/2"],
    ]


def test_in_parallel_reads_its_plans_only_as_places_free_up() -> None:
    started: list[str] = []

    def plans() -> Iterator[Plan[str]]:
        for name in "abcd":
            started.append(name)
            yield _two_requests(name)

    plan = in_parallel(plans(), width=1)
    assert [request.path for request in next(plan)] == ["/a/1"]
    assert started == ["a"]
    plan.send([_answer(Request("GET", "/a/1"))])
    assert started == ["a"]
    result, _ = _drive_rest(plan, [_answer(Request("GET", "/a/2"))])
    assert result == ["/a/1/a/2", "/b/1/b/2", "/c/1/c/2", "/d/1/d/2"]
    assert started == ["a", "b", "c", "d"]


def test_a_refusal_raises_with_the_services_message() -> None:
    with pytest.raises(RequestRefused) as refused:
        _drive(send(Request("GET", "/missing")), status_of=lambda request: 404)
    assert refused.value.status_code == 404
    request = httpx.Request("POST", "http://service/documents")
    body = {"error": {"message": "text is empty", "param": "documents.3.text"}}
    error = RequestRefused(httpx.Response(422, json=body, request=request))
    assert (error.message, error.position("documents"), error.position("ids")) == (
        "text is empty",
        3,
        None,
    )
    assert checked(httpx.Response(201, request=request)).status_code == 201
