"""``fractal ingest --collection C [--create]``'s preparation of the collection
(:func:`bulk.ingest.prepare_collection`) against a scripted service: the cases a real one shows
only in a race (another client creates the collection between the listing and the creation)."""

from __future__ import annotations

import json

import httpx
import pytest

from bulk.errors import BulkError
from bulk.ingest import prepare_collection
from client import FractalClient, RequestRefused

DEFAULT = {"name": "default", "default": True, "index_kinds": ["hnsw", "exact"], "documents": 0}


def _news(kinds: list[str]) -> dict:
    return {"name": "news", "default": False, "index_kinds": kinds, "documents": 0}


def _client(answers: list[httpx.Response], sent: list[httpx.Request]) -> FractalClient:
    """A client of a service that gives ``answers`` in order, recording what was ``sent``."""

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return answers.pop(0)

    http = httpx.Client(transport=httpx.MockTransport(answer), base_url="http://service")
    return FractalClient(http)


def _listing(*collections: dict) -> httpx.Response:
    return httpx.Response(200, json={"collections": list(collections)})


def test_a_creation_by_another_client_meanwhile_is_used() -> None:
    sent: list[httpx.Request] = []
    conflict = {"error": {"type": "conflict", "message": "collection 'news' already exists"}}
    answers = [_listing(DEFAULT), httpx.Response(409, json=conflict)]
    answers.append(_listing(DEFAULT, _news(["hnsw", "exact"])))
    assert prepare_collection(_client(answers, sent), "news", True, None) is None
    assert [(request.method, request.url.path) for request in sent] == [
        ("GET", "/collections"),
        ("POST", "/collections"),
        ("GET", "/collections"),
    ]
    assert json.loads(sent[1].content) == {"name": "news"}  # the service's default kinds


def test_the_kinds_given_are_sent_and_those_created_returned() -> None:
    sent: list[httpx.Request] = []
    answers = [_listing(DEFAULT), httpx.Response(201, json=_news(["exact"]))]
    assert prepare_collection(_client(answers, sent), "news", True, ["exact"]) == ["exact"]
    assert json.loads(sent[1].content) == {"name": "news", "index_kinds": ["exact"]}


def test_another_creation_meanwhile_with_other_kinds_is_refused() -> None:
    conflict = {"error": {"type": "conflict", "message": "collection 'news' already exists"}}
    answers = [_listing(DEFAULT), httpx.Response(409, json=conflict)]
    answers.append(_listing(DEFAULT, _news(["hnsw"])))
    with pytest.raises(BulkError, match="exists with the index kinds hnsw, not exact"):
        prepare_collection(_client(answers, []), "news", True, ["exact"])


def test_a_listing_the_service_refuses_is_its_refusal() -> None:
    wrong_key = {"error": {"type": "unauthorized", "message": "the API key is not valid"}}
    with pytest.raises(RequestRefused):
        prepare_collection(_client([httpx.Response(401, json=wrong_key)], []), "news", True, None)
