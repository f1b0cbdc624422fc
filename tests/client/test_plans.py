"""Plans run without I/O: a plan driven by hand sees what it asked for. Run by the transports
against a scripted service, :func:`client.plans.in_parallel` runs each plan at its own pace
within its width, keeps their order, reads its plans lazily, and stops on an error with what
was done; an error while sending is raised inside the plan."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator

import httpx
import pytest

from client import AsyncFractalClient, FractalClient
from client.errors import RequestRefused, checked
from client.plans import Plan, Request, in_parallel, send

BASE = "http://service"


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


def _two_requests(name: str) -> Plan[str]:
    first = yield from send(Request("GET", f"/{name}/1"))
    second = yield from send(Request("GET", f"/{name}/2"))
    return first.json()["path"] + second.json()["path"]


def _fanned(plans: Iterable[Plan[str]], width: int) -> Plan[list[str]]:
    return (yield from in_parallel(plans, width))


def _echo(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"path": request.url.path})


def _sync_client(handler: Callable[[httpx.Request], httpx.Response]) -> FractalClient:
    """A client of a scripted service: ``handler`` answers each request, on the client's
    worker threads."""
    return FractalClient(httpx.Client(transport=httpx.MockTransport(handler), base_url=BASE))


def test_in_parallel_runs_each_plan_at_its_own_pace_and_keeps_their_order() -> None:
    sent: list[str] = []
    in_flight, most, lock = [0], [0], threading.Lock()
    c_done = threading.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        with lock:
            sent.append(request.url.path)
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        if request.url.path == "/a/1":  # slow: b and c go on meanwhile
            assert c_done.wait(10), "a slow plan held the others back"
        if request.url.path == "/c/2":
            c_done.set()
        with lock:
            in_flight[0] -= 1
        return _echo(request)

    with _sync_client(handler) as client:
        result = client.run(_fanned((_two_requests(name) for name in "abc"), width=2))
    assert result == ["/a/1/a/2", "/b/1/b/2", "/c/1/c/2"]
    assert sent.index("/c/2") < sent.index("/a/2")
    assert most[0] == 2


def test_in_parallel_reads_its_plans_only_as_places_free_up() -> None:
    started: list[str] = []
    seen: dict[str, list[str]] = {}

    def plans() -> Iterator[Plan[str]]:
        for name in "abcd":
            started.append(name)
            yield _two_requests(name)

    def handler(request: httpx.Request) -> httpx.Response:
        seen[request.url.path] = list(started)
        return _echo(request)

    with _sync_client(handler) as client:
        result = client.run(_fanned(plans(), width=1))
    assert result == ["/a/1/a/2", "/b/1/b/2", "/c/1/c/2", "/d/1/d/2"]
    assert seen["/a/1"] == seen["/a/2"] == ["a"]
    assert seen["/d/2"] == ["a", "b", "c", "d"]


def test_the_async_transport_runs_each_plan_at_its_own_pace() -> None:
    sent: list[str] = []

    async def main() -> list[str]:
        c_done = asyncio.Event()

        async def handler(request: httpx.Request) -> httpx.Response:
            sent.append(request.url.path)
            if request.url.path == "/a/1":
                await asyncio.wait_for(c_done.wait(), 10)
            if request.url.path == "/c/2":
                c_done.set()
            return _echo(request)

        http = httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url=BASE)
        async with AsyncFractalClient(http) as client:
            return await client.run(_fanned((_two_requests(name) for name in "abc"), width=2))

    assert asyncio.run(main()) == ["/a/1/a/2", "/b/1/b/2", "/c/1/c/2"]
    assert sent.index("/c/2") < sent.index("/a/2")


def test_a_refused_batch_stops_the_ingest_and_names_what_was_stored() -> None:
    """Batches of 2 with 2 in flight: the second batch is refused while the first is still
    being stored. The first is finished and reported, the third is never sent."""
    texts_sent: list[list[str]] = []
    refused = threading.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/info":
            return httpx.Response(200, json={"limits": {"max_texts": 2}})
        texts = [doc["text"] for doc in json.loads(request.content)["documents"]]
        texts_sent.append(texts)
        if texts[0] == "t2":
            refused.set()
            error = {"error": {"message": "no space left", "param": None}}
            return httpx.Response(507, json=error)
        if texts[0] == "t0":
            assert refused.wait(10)
            time.sleep(0.2)  # the refusal is booked before this batch ends
        return httpx.Response(201, json={"ids": [f"id-{text}" for text in texts]})

    with _sync_client(handler) as client, pytest.raises(RequestRefused) as stopped:
        client.add_documents((f"t{n}" for n in range(6)), concurrency=2)
    assert stopped.value.status_code == 507
    assert stopped.value.stored_ids == {0: "id-t0", 1: "id-t1"}
    assert sorted(texts_sent) == [["t0", "t1"], ["t2", "t3"]]


def test_a_transport_error_is_raised_inside_the_plan() -> None:
    def falls_back() -> Plan[str]:
        try:
            return (yield from _two_requests("a"))
        except httpx.ConnectError:
            return "fallback"

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with _sync_client(handler) as client:
        assert client.run(falls_back()) == "fallback"
        assert client.run(_fanned([falls_back(), falls_back()], width=2)) == ["fallback"] * 2


def test_an_error_reading_the_documents_names_what_was_stored() -> None:
    """The async client too: the batches before the caller's iterable failed are stored and
    reported."""

    def documents() -> Iterator[str]:
        yield from ("t0", "t1", "t2")
        raise OSError("the corpus file went away")

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/info":
            return httpx.Response(200, json={"limits": {"max_texts": 2}})
        texts = [doc["text"] for doc in json.loads(request.content)["documents"]]
        return httpx.Response(201, json={"ids": [f"id-{text}" for text in texts]})

    async def main() -> None:
        http = httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url=BASE)
        async with AsyncFractalClient(http) as client:
            await client.add_documents(documents(), concurrency=1)

    with pytest.raises(OSError, match="went away") as stopped:
        asyncio.run(main())
    assert stopped.value.stored_ids == {0: "id-t0", 1: "id-t1"}  # type: ignore[attr-defined]


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
