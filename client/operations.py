"""Every operation of the service's API, written once as a plan (see :mod:`client.plans`) and
shared by :class:`~client.FractalClient` and :class:`~client.AsyncFractalClient`.

A ``collection`` argument names the collection an operation works in; without one, the
client's ``collection`` is used, and without that, the service's default collection.

Ingest can go on past bad documents (``add_documents(..., on_reject=...)``): a batch the service
refuses as a whole (422 or 413) is narrowed down to the documents at fault, which are reported,
while the others are stored. The service names the first document at fault in its error's
``param`` (``documents.3.text``): that one is set aside and the rest resent, one request per bad
document; a refusal that names no document (a body too large) is split in halves until it does,
or until one document is left, which is then the one at fault. Nothing is checked here twice:
the service's answer is the only judge.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from itertools import islice
from typing import Any, Literal
from urllib.parse import quote

import httpx

from client.errors import RequestRefused
from client.operation import operation
from client.plans import Plan, Request, in_parallel, send
from client.results import Collection, Document, Embeddings, SearchResult

Granularity = Literal["coarse", "fine", "auto"]
IndexKind = Literal["exact", "hnsw", "pq"]
Rerank = Literal["none", "c2f"]
Scoring = Literal["cosine", "sfs"]
Filter = dict[str, Any]
"""A metadata filter in the service's grammar, e.g. ``{"key": "lang", "eq": "en"}``."""
Progress = bool | Callable[[int], None]
"""``True``: a progress bar on stderr (tqdm); a callable: called with each step's count."""

LOOKUP_BATCH = 1000
"""Ids per ``POST /documents/lookup``: the service's limit (``service.limits.MAX_LOOKUP_IDS``)."""
NARROWED_STATUSES = (413, 422)
"""Refusals of a whole batch that ``add_documents(..., on_reject=...)`` narrows down."""
DEFAULT_MAX_TEXTS = 128
"""Texts per ``/embed`` request when ``/info`` does not state the service's ``max_texts``."""


class Operations:
    """The API as methods; a transport (:mod:`client.transport`) runs them."""

    collection: str | None
    max_texts: int | None

    def _collection(self, collection: str | None) -> str | None:
        return collection if collection is not None else self.collection

    def _documents(self, collection: str | None) -> str:
        name = self._collection(collection)
        return f"/collections/{quote(name, safe='')}/documents" if name else "/documents"

    # -- the raw API and the service ------------------------------------------------------

    @operation
    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        resendable: bool | None = None,
    ) -> Plan[httpx.Response]:
        """Any request, retried on 429 (and on 503 when ``resendable``; default: for GET,
        HEAD and DELETE only); the answer, or :class:`~client.errors.RequestRefused` for any
        other 4xx / 5xx."""
        if resendable is None:
            resendable = method.upper() in ("GET", "HEAD", "DELETE")
        return (yield from send(Request(method, path, params, json, resendable)))

    @operation
    def info(self) -> Plan[dict[str, Any]]:
        """``GET /info``: the model, its resolutions, the index, the encoder and the limits."""
        return (yield from _info(self))

    @operation
    def models(self) -> Plan[list[str]]:
        """``GET /v1/models``: the ids of the models the service serves."""
        answer = yield from send(Request("GET", "/v1/models"))
        return [model["id"] for model in answer.json()["data"]]

    # -- embeddings -----------------------------------------------------------------------

    @operation
    def embed(
        self,
        texts: Sequence[str],
        *,
        dims: int | Sequence[int] | None = None,
        granularity: Literal["coarse", "fine"] | None = None,
        normalize: bool = True,
        batch_size: int | None = None,
    ) -> Plan[Embeddings]:
        """``POST /embed``: each text's vector at the prefix ``dims`` (one or several; default:
        the full vector), or at a ``granularity``'s prefix. Texts are sent ``batch_size`` a
        request (default: the service's ``max_texts``)."""
        if not texts:
            return Embeddings("", [], normalize, [])
        if batch_size is None:
            batch_size = yield from _max_texts(self)
        options: dict[str, Any] = {"normalize": normalize}
        if dims is not None:
            options["dims"] = dims if isinstance(dims, int) else list(dims)
        if granularity is not None:
            options["granularity"] = granularity
        parts: list[Embeddings] = []
        for start in range(0, len(texts), batch_size):
            body = {"texts": list(texts[start : start + batch_size]), **options}
            answer = yield from send(Request("POST", "/embed", json=body))
            parts.append(Embeddings.from_json(answer.json()))
        return Embeddings(
            parts[0].model,
            parts[0].dims,
            parts[0].normalized,
            [vectors for part in parts for vectors in part.vectors],
        )

    # -- search ---------------------------------------------------------------------------

    @operation
    def search(
        self,
        query: str,
        *,
        k: int | None = None,
        granularity: Granularity | None = None,
        index: IndexKind | None = None,
        rerank: Rerank | None = None,
        shortlist_dim: int | None = None,
        scoring: Scoring | None = None,
        filter: Filter | None = None,
        collection: str | None = None,
    ) -> Plan[SearchResult]:
        """``GET /search``: one query's hits, its route and the service's stage timings.
        Options left at None take the service's defaults."""
        options = _search_options(locals())
        if filter is not None:
            options["filter"] = json.dumps(filter)
        answer = yield from send(Request("GET", "/search", params={"q": query, **options}))
        body = answer.json()
        return SearchResult.from_json(body, body["timings_ms"])

    @operation
    def search_batch(
        self,
        queries: Sequence[str],
        *,
        k: int | None = None,
        granularity: Granularity | None = None,
        index: IndexKind | None = None,
        rerank: Rerank | None = None,
        shortlist_dim: int | None = None,
        scoring: Scoring | None = None,
        filter: Filter | None = None,
        collection: str | None = None,
        batch_size: int | None = None,
    ) -> Plan[list[SearchResult]]:
        """``POST /search``, ``batch_size`` queries a request (default: the service's
        ``max_texts``): one result per query, in order (each carries its batch's timings)."""
        options = _search_options(locals())
        if filter is not None:
            options["filter"] = filter
        if batch_size is None:
            batch_size = yield from _max_texts(self)
        results: list[SearchResult] = []
        for start in range(0, len(queries), batch_size):
            body = {"queries": list(queries[start : start + batch_size]), **options}
            answer = (yield from send(Request("POST", "/search", json=body))).json()
            timings = answer["timings_ms"]
            results += [SearchResult.from_json(result, timings) for result in answer["results"]]
        return results

    # -- documents ------------------------------------------------------------------------

    @operation
    def add_documents(
        self,
        documents: Iterable[dict[str, Any] | str],
        *,
        collection: str | None = None,
        batch_size: int | None = None,
        concurrency: int = 1,
        progress: Progress = False,
        total: int | None = None,
        on_reject: Callable[[int, str], None] | None = None,
    ) -> Plan[list[str]]:
        """``POST /documents`` in batches of ``batch_size`` (default: the service's
        ``max_texts``), ``concurrency`` batches in flight; the ids the service acknowledged, in
        the order of ``documents``. A document is a text or ``{"text", "id"?, "metadata"?}``;
        ``documents`` may be any iterable, read as the batches go (``total`` sizes the progress
        bar of one without a length). ``progress`` (a callable) and ``on_reject`` are called
        one at a time, from the client's worker threads on the synchronous client.

        Without ``on_reject`` a refused batch raises :class:`~client.errors.RequestRefused`.
        With it, a batch refused with 422 or 413 is narrowed down (see the module docstring):
        ``on_reject(position, message)`` for each document at fault (its position in
        ``documents``), the others are stored, and the ids returned are those of the stored
        documents alone. Either way, an error stops the ingest: no batch is sent after it, those
        in flight are finished, and the error (a refusal, a transport error, or one raised
        while reading ``documents``) carries ``stored_ids``, the id of every document stored,
        by position."""
        path = self._documents(collection)
        if batch_size is None:
            batch_size = yield from _max_texts(self)
        size = batch_size
        acknowledged: dict[int, str] = {}
        lock = threading.Lock()
        with _progress_bar(progress, documents, total, "ingest") as shown:

            def settle(stored: dict[int, str], settled: int) -> None:
                with lock:
                    acknowledged.update(stored)
                    shown(settled)

            def reject(position: int, message: str) -> None:
                assert on_reject is not None
                with lock:
                    on_reject(position, message)
                    shown(1)

            def store(start: int, batch: list[dict[str, Any]]) -> Plan[None]:
                positions = list(range(start, start + len(batch)))
                if on_reject is None:
                    ids = (yield from send(_write(path, batch))).json()["ids"]
                    settle(dict(zip(positions, ids, strict=True)), len(batch))
                else:
                    yield from _store_narrowing(path, batch, positions, settle, reject)

            try:
                yield from in_parallel(
                    (store(start, batch) for start, batch in _batches(documents, size)),
                    concurrency,
                )
            except BaseException as error:
                error.stored_ids = dict(sorted(acknowledged.items()))  # type: ignore[attr-defined]
                raise
        return [acknowledged[position] for position in sorted(acknowledged)]

    @operation
    def add_vectors(
        self,
        documents: Iterable[dict[str, Any]],
        *,
        bundle_hash: str | None = None,
        collection: str | None = None,
        batch_size: int | None = None,
        progress: Progress = False,
        total: int | None = None,
    ) -> Plan[list[str]]:
        """``POST /documents/vectors``: documents with their precomputed full vectors
        (``{"text", "vector", "id"?, "metadata"?}``; a vector may be a NumPy array), checked
        against ``bundle_hash`` (default: the served bundle's, from ``/info``); their ids."""
        if bundle_hash is None:
            bundle_hash = str((yield from _info(self))["bundle_hash"])
        path = f"{self._documents(collection)}/vectors"
        if batch_size is None:
            batch_size = yield from _max_texts(self)
        ids: list[str] = []
        with _progress_bar(progress, documents, total, "import") as advance:
            for _, batch in _batches(documents, batch_size):
                body = {"bundle_hash": bundle_hash, "documents": [_listed(doc) for doc in batch]}
                answer = yield from send(
                    Request("POST", path, json=body, resendable=_names_every_id(batch))
                )
                ids += answer.json()["ids"]
                advance(len(batch))
        return ids

    @operation
    def get_document(self, doc_id: str, *, collection: str | None = None) -> Plan[Document]:
        """``GET /documents/{id}``: the stored document (404 refused if there is none)."""
        path = f"{self._documents(collection)}/{quote(doc_id, safe='')}"
        return Document.from_json((yield from send(Request("GET", path))).json())

    @operation
    def delete_document(self, doc_id: str, *, collection: str | None = None) -> Plan[bool]:
        """``DELETE /documents/{id}``: True once deleted (404 refused if there is none)."""
        path = f"{self._documents(collection)}/{quote(doc_id, safe='')}"
        return bool((yield from send(Request("DELETE", path))).json()["deleted"])

    @operation
    def lookup(
        self, ids: Sequence[str], *, collection: str | None = None, batch_size: int = LOOKUP_BATCH
    ) -> Plan[set[str]]:
        """Which of ``ids`` are stored: ``POST /documents/lookup``, ``batch_size`` ids a
        request. An id the service refuses to look up (too long, say) cannot be stored, so
        it is left out of the question and of the answer."""
        path = f"{self._documents(collection)}/lookup"
        found: set[str] = set()
        for start in range(0, len(ids), batch_size):
            asked = list(ids[start : start + batch_size])
            while asked:
                [answer] = yield [Request("POST", path, json={"ids": asked})]
                refused = RequestRefused(answer) if answer.status_code >= 400 else None
                at_fault = refused.position("ids") if refused else None
                if refused is None:
                    found.update(answer.json()["found"])
                    break
                if refused.status_code != 422 or at_fault is None or at_fault >= len(asked):
                    raise refused
                del asked[at_fault]
        return found

    # -- collections ----------------------------------------------------------------------

    @operation
    def collections(self) -> Plan[list[Collection]]:
        """``GET /collections``: every collection, the default one included."""
        answer = yield from send(Request("GET", "/collections"))
        return [Collection.from_json(item) for item in answer.json()["collections"]]

    @operation
    def create_collection(
        self, name: str, *, index_kinds: Sequence[str] | None = None
    ) -> Plan[Collection]:
        """``POST /collections``: a new, empty collection with ``index_kinds`` (default: the
        service's); 409 refused if it exists."""
        body: dict[str, Any] = {"name": name}
        if index_kinds is not None:
            body["index_kinds"] = list(index_kinds)
        answer = yield from send(Request("POST", "/collections", json=body, resendable=False))
        return Collection.from_json(answer.json())

    @operation
    def delete_collection(self, name: str) -> Plan[bool]:
        """``DELETE /collections/{name}`` with its documents (the body repeats the name, as the
        service asks); True once deleted."""
        path = f"/collections/{quote(name, safe='')}"
        answer = yield from send(Request("DELETE", path, json={"name": name}))
        return bool(answer.json()["deleted"])


def _info(client: Operations) -> Plan[dict[str, Any]]:
    info: dict[str, Any] = (yield from send(Request("GET", "/info"))).json()
    client.max_texts = int(info.get("limits", {}).get("max_texts", DEFAULT_MAX_TEXTS))
    return info


def _max_texts(client: Operations) -> Plan[int]:
    if client.max_texts is None:
        yield from _info(client)
    return client.max_texts or DEFAULT_MAX_TEXTS


def _search_options(arguments: dict[str, Any]) -> dict[str, Any]:
    """The search options of a ``search`` call's arguments that are set (the collection
    defaulting to the client's); the filter is left to the caller, which encodes it."""
    client: Operations = arguments["self"]
    names = ("k", "granularity", "index", "rerank", "shortlist_dim", "scoring")
    options = {name: arguments[name] for name in names if arguments[name] is not None}
    collection = client._collection(arguments["collection"])
    return {**options, "collection": collection} if collection else options


def _batches(
    documents: Iterable[dict[str, Any] | str], size: int
) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """``documents`` as (position of the first, batch) in batches of ``size``; a text
    becomes ``{"text": text}``."""
    source = iter(documents)
    start = 0
    while batch := list(islice(source, max(size, 1))):
        yield start, [{"text": doc} if isinstance(doc, str) else doc for doc in batch]
        start += len(batch)


def _listed(document: dict[str, Any]) -> dict[str, Any]:
    """A vector document with its vector as a list (a NumPy array has ``tolist``)."""
    vector = document["vector"]
    return {**document, "vector": vector.tolist() if hasattr(vector, "tolist") else vector}


def _write(path: str, batch: list[dict[str, Any]]) -> Request:
    """``POST`` of ``batch``: resendable on 503 when it names every document's id."""
    return Request("POST", path, json={"documents": batch}, resendable=_names_every_id(batch))


def _names_every_id(batch: list[dict[str, Any]]) -> bool:
    """Whether every document of ``batch`` names its id (a null id lets the service pick one),
    so that sending the batch twice stores nothing twice."""
    return all(document.get("id") is not None for document in batch)


def _store_narrowing(
    path: str,
    batch: list[dict[str, Any]],
    positions: list[int],
    settle: Callable[[dict[int, str], int], None],
    reject: Callable[[int, str], None],
) -> Plan[None]:
    """Store ``batch`` (at ``positions`` of the caller's documents), setting aside those the
    service refuses: ``settle(ids by position, count)`` for each part stored, ``reject(position,
    message)`` for each document at fault."""
    by_position = dict(zip(positions, batch, strict=True))
    pending = [positions]
    while pending:
        part = pending.pop()
        [answer] = yield [_write(path, [by_position[position] for position in part])]
        if answer.status_code < 400:
            settle(dict(zip(part, answer.json()["ids"], strict=True)), len(part))
            continue
        refused = RequestRefused(answer)
        if refused.status_code not in NARROWED_STATUSES:
            raise refused
        at_fault = 0 if len(part) == 1 else refused.position("documents")
        if at_fault is None or at_fault >= len(part):
            half = len(part) // 2
            pending += [part[half:], part[:half]]
            continue
        # The answer may list problems of later documents too: keep this one's.
        first = refused.message.split("; documents.")[0]
        reject(part[at_fault], first.replace(f"documents.{at_fault}.", ""))
        rest = part[:at_fault] + part[at_fault + 1 :]
        if rest:
            pending.append(rest)


class _progress_bar:  # noqa: N801 (a context manager used like a function)
    """``progress`` as a function of the count each step settled: a tqdm bar (sized by
    ``total``, or by the documents' length), the caller's callable, or nothing."""

    def __init__(
        self, progress: Progress, documents: Iterable[Any], total: int | None, what: str
    ) -> None:
        self._bar: Any = None
        if callable(progress):
            self._advance: Callable[[int], None] = progress
        elif progress:
            from tqdm.auto import tqdm

            size = (
                total
                if total is not None
                else (len(documents) if isinstance(documents, Sized) else None)
            )
            self._bar = tqdm(total=size, desc=what, unit="doc")
            self._advance = self._bar.update
        else:
            self._advance = _ignore

    def __enter__(self) -> Callable[[int], None]:
        return self._advance

    def __exit__(self, *exc_info: object) -> None:
        if self._bar is not None:
            self._bar.close()


def _ignore(count: int) -> None:
    """No progress shown."""
