"""A small HTTP client of the Fractal service: wait for ready, batched ingest, search.

    with FractalClient("http://127.0.0.1:8000") as client:
        client.wait_ready(60)
        ids = client.add_documents([{"text": "hello", "metadata": {"lang": "en"}}])
        hits = client.search_batch(["hi there"], k=5, granularity="coarse")

It wraps any :class:`httpx.Client` (FastAPI's ``TestClient`` is one), so the tests drive the
in-process app through the same code as the CLI and the benchmarks drive a real server.
Overload answers (429) are retried after the ``Retry-After`` the service computed, a bounded
number of times; any other refusal raises :class:`RequestRefused` with the service's message.

Ingest can go on past bad documents (``add_documents(..., on_reject=...)``): a batch the service
refuses as a whole (422 or 413) is narrowed down to the documents at fault, which are reported,
while the others are stored. The service names the first document at fault in its error's
``param`` (``documents.3.text``): that one is set aside and the rest resent, one request per bad
document; a refusal that names no document (a body too large) is split in halves until it does,
or until one document is left, which is then the one at fault. Nothing is checked here twice:
the service's answer is the only judge.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from support.processes import wait_until

DEFAULT_TIMEOUT_S = 300.0
RETRIES_ON_429 = 20
MAX_RETRY_WAIT_S = 30.0
LOOKUP_BATCH = 1000
"""Ids per ``POST /documents/lookup``: the service's limit (``service.limits.MAX_LOOKUP_IDS``)."""
NARROWED_STATUSES = (413, 422)
"""Refusals of a whole batch that ``add_documents(..., on_reject=...)`` narrows down."""


class RequestRefused(RuntimeError):
    """The service answered a request with an error status (after any retries)."""

    def __init__(self, response: httpx.Response) -> None:
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


class FractalClient:
    """The service's HTTP API as methods. Build it from a base URL (it then owns an
    :class:`httpx.Client`) or from an existing client (it then leaves closing to the caller)."""

    def __init__(
        self,
        target: str | httpx.Client,
        *,
        api_key: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        collection: str | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # Documents go to, and searches run in, this named collection (None: the default one).
        self.collection = collection
        self._documents = f"/collections/{collection}/documents" if collection else "/documents"
        if isinstance(target, str):
            self.http = httpx.Client(base_url=target, timeout=timeout_s, headers=headers)
            self._owned = True
        else:  # any client with httpx's API: Starlette's TestClient now builds on ``httpx2``
            self.http, self._owned = target, False
            self.http.headers.update(headers)

    def __enter__(self) -> FractalClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owned:
            self.http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request, retried on 429 after its ``Retry-After`` (at most ``RETRIES_ON_429``
        times); :class:`RequestRefused` for any other 4xx / 5xx answer."""
        for _ in range(RETRIES_ON_429):
            response = self.http.request(method, path, **kwargs)
            if response.status_code != 429:
                break
            wait = float(response.headers.get("Retry-After", "1") or 1)
            time.sleep(min(max(wait, 0.05), MAX_RETRY_WAIT_S))
        if response.status_code >= 400:
            raise RequestRefused(response)
        return response

    def is_ready(self) -> bool:
        """Whether ``GET /ready`` answers 200 now (a refused connection is a no)."""
        try:
            return self.http.get("/ready").status_code == 200
        except httpx.TransportError:
            return False

    def wait_ready(self, timeout_s: float) -> None:
        """Until ``/ready`` answers 200; :class:`TimeoutError` after ``timeout_s``."""
        wait_until(self.is_ready, f"a ready Fractal service at {self.http.base_url}", timeout_s)

    def info(self) -> dict:
        return self.request("GET", "/info").json()

    def add_documents(
        self,
        documents: Sequence[dict],
        *,
        batch_size: int = 128,
        concurrency: int = 1,
        progress: Callable[[int], None] | None = None,
        on_reject: Callable[[int, str], None] | None = None,
    ) -> list[str]:
        """``POST /documents`` in batches of ``batch_size``, ``concurrency`` batches in flight
        at once; the ids the service acknowledged, in the order of ``documents``.
        ``progress(n)`` is called with the number of documents each answer settled.

        Without ``on_reject`` a refused batch raises :class:`RequestRefused`. With it, a batch
        refused with 422 or 413 is narrowed down (see the module docstring):
        ``on_reject(position, message)`` for each document at fault (its position in
        ``documents``, the service's message), the others are stored, and the ids returned are
        those of the stored documents alone."""
        starts = range(0, len(documents), batch_size)

        def send(start: int) -> list[str]:
            positions = list(range(start, min(start + batch_size, len(documents))))
            if on_reject is None:
                batch = [documents[position] for position in positions]
                ids = self.request("POST", self._documents, json={"documents": batch}).json()["ids"]
                if progress is not None:
                    progress(len(batch))
                return ids
            return self._add_narrowing(documents, positions, progress, on_reject)

        if concurrency <= 1:
            batches = [send(start) for start in starts]
        else:
            with ThreadPoolExecutor(concurrency) as pool:
                batches = list(pool.map(send, starts))
        return [doc_id for ids in batches for doc_id in ids]

    def _add_narrowing(
        self,
        documents: Sequence[dict],
        positions: list[int],
        progress: Callable[[int], None] | None,
        on_reject: Callable[[int, str], None],
    ) -> list[str]:
        """Store the documents at ``positions``, setting aside those the service refuses."""
        stored: dict[int, str] = {}
        pending = [positions]
        while pending:
            part = pending.pop()
            batch = [documents[position] for position in part]
            try:
                ids = self.request("POST", self._documents, json={"documents": batch}).json()["ids"]
            except RequestRefused as refused:
                if refused.status_code not in NARROWED_STATUSES:
                    raise
                at_fault = refused.position("documents")
                if len(part) == 1:
                    at_fault = 0
                if at_fault is None or at_fault >= len(part):
                    half = len(part) // 2
                    pending += [part[half:], part[:half]]
                    continue
                # The answer may list problems of later documents too: keep this one's.
                first = refused.message.split("; documents.")[0]
                message = first.replace(f"documents.{at_fault}.", "")
                on_reject(part[at_fault], message)
                if progress is not None:
                    progress(1)
                rest = part[:at_fault] + part[at_fault + 1 :]
                if rest:
                    pending.append(rest)
                continue
            stored.update(zip(part, ids, strict=True))
            if progress is not None:
                progress(len(part))
        return [stored[position] for position in sorted(stored)]

    def stored_ids(self, ids: Sequence[str], *, batch_size: int = LOOKUP_BATCH) -> set[str]:
        """Which of ``ids`` the service stores: ``POST /documents/lookup``, ``batch_size`` ids
        a request. An id the service refuses to look up (too long, say) cannot be stored, so
        it is left out of the question and of the answer."""
        found: set[str] = set()
        for start in range(0, len(ids), batch_size):
            asked = list(ids[start : start + batch_size])
            while asked:
                try:
                    response = self.request(
                        "POST", f"{self._documents}/lookup", json={"ids": asked}
                    )
                except RequestRefused as refused:
                    at_fault = refused.position("ids")
                    if refused.status_code != 422 or at_fault is None or at_fault >= len(asked):
                        raise
                    del asked[at_fault]
                    continue
                found.update(response.json()["found"])
                break
        return found

    def search(self, query: str, **params: Any) -> dict:
        """``GET /search?q=…`` with ``params`` as query parameters; the JSON answer."""
        scope = {"collection": self.collection} if self.collection else {}
        return self.request("GET", "/search", params={"q": query, **scope, **params}).json()

    def search_batch(
        self, queries: Sequence[str], *, batch_size: int = 128, **options: Any
    ) -> list[dict]:
        """``POST /search`` in batches of ``batch_size`` queries with ``options`` in the body
        (``k``, ``granularity``, ``index``, ``rerank``…); one result per query, in order."""
        results: list[dict] = []
        scope = {"collection": self.collection} if self.collection else {}
        for start in range(0, len(queries), batch_size):
            body = {"queries": list(queries[start : start + batch_size]), **scope, **options}
            results += self.request("POST", "/search", json=body).json()["results"]
        return results
