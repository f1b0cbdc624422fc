"""LangChain over the Fractal service: an ``Embeddings`` and a ``VectorStore``.

    from support.langchain_store import FractalEmbeddings, FractalVectorStore

    store = FractalVectorStore("http://127.0.0.1:8000", granularity="coarse")
    store.add_texts(["move funds to savings"], metadatas=[{"src": "faq"}], ids=["faq-1"])
    store.similarity_search_with_score("send money", k=3, filter={"key": "src", "eq": "faq"})
    store.similarity_search("send money", granularity="fine", rerank="c2f", collection="news")
    retriever = store.as_retriever(search_kwargs={"k": 5, "granularity": "auto"})

    FractalEmbeddings("http://127.0.0.1:8000", dims=64).embed_query("send money")

The service encodes: the store sends texts (``POST /documents``) and queries (``POST /search``),
never vectors, so the ``embedding`` that LangChain's constructors take is not used. A search's
``granularity``, ``rerank``, ``filter`` (the service's filter grammar) and ``collection`` override
the store's defaults for that call; other keywords (``index``, ``shortlist_dim``, ``scoring``)
go to the service as they are. Scores are the service's cosines. A refusal raises
:class:`~support.client.RequestRefused` with the service's message; 429 is retried as
:class:`~support.client.FractalClient` does. Installed with the ``langchain`` extra.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal
from urllib.parse import quote

import httpx
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from support.client import (
    DEFAULT_TIMEOUT_S,
    MAX_RETRY_WAIT_S,
    RETRIES_ON_429,
    FractalClient,
    RequestRefused,
)

Granularity = Literal["coarse", "fine", "auto"]
Rerank = Literal["none", "c2f"]
DEFAULT_MAX_TEXTS = 128
"""Texts per request when ``/info`` does not state the service's ``limits.max_texts``."""


def _max_texts(info: dict) -> int:
    return int(info.get("limits", {}).get("max_texts", DEFAULT_MAX_TEXTS))


def _documents_path(collection: str | None) -> str:
    return f"/collections/{quote(collection, safe='')}/documents" if collection else "/documents"


def _is_missing_document(refused: RequestRefused) -> bool:
    """A 404 naming the document (a missing collection names ``collection`` instead)."""
    return refused.status_code == 404 and refused.param == "id"


def _document(stored: dict[str, Any]) -> Document:
    """A stored document or a search hit (``id``, ``text``, ``metadata``) as LangChain's."""
    return Document(id=stored["id"], page_content=stored["text"], metadata=stored["metadata"])


def _vectors(answer: dict) -> list[list[float]]:
    """The one vector per text of a ``POST /embed`` answer, in the order of the texts."""
    data = sorted(answer["data"], key=lambda item: item["index"])
    return [item["embeddings"][0]["vector"] for item in data]


async def _arequest(
    http: httpx.AsyncClient, method: str, path: str, **kwargs: Any
) -> httpx.Response:
    """:meth:`FractalClient.request`, awaited: 429 retried after its ``Retry-After``, any other
    4xx / 5xx raised as :class:`RequestRefused`."""
    for _ in range(RETRIES_ON_429):
        response = await http.request(method, path, **kwargs)
        if response.status_code != 429:
            break
        wait = float(response.headers.get("Retry-After", "1") or 1)
        await asyncio.sleep(min(max(wait, 0.05), MAX_RETRY_WAIT_S))
    if response.status_code >= 400:
        raise RequestRefused(response)
    return response


class FractalEmbeddings(Embeddings):
    """The service's ``POST /embed``: the full vector of each text, or its ``dims`` prefix
    (a trained prefix, re-normalised), ``batch_size`` texts a request (default: the service's
    ``limits.max_texts``, read from ``/info`` once)."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        dims: int | None = None,
        batch_size: int | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.url, self.dims, self.batch_size, self.timeout_s = url, dims, batch_size, timeout_s
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = FractalClient(url, api_key=api_key, timeout_s=timeout_s)

    def close(self) -> None:
        self._client.close()

    def _body(self, texts: list[str]) -> dict[str, Any]:
        return {"texts": texts} if self.dims is None else {"texts": texts, "dims": self.dims}

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        if self.batch_size is None:
            self.batch_size = _max_texts(self._client.info())
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            answer = self._client.request("POST", "/embed", json=self._body(batch))
            vectors += _vectors(answer.json())
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        async with httpx.AsyncClient(
            base_url=self.url, headers=self._headers, timeout=self.timeout_s
        ) as http:
            if self.batch_size is None:
                self.batch_size = _max_texts((await _arequest(http, "GET", "/info")).json())
            vectors: list[list[float]] = []
            for start in range(0, len(texts), self.batch_size):
                batch = list(texts[start : start + self.batch_size])
                answer = await _arequest(http, "POST", "/embed", json=self._body(batch))
                vectors += _vectors(answer.json())
        return vectors

    async def aembed_query(self, text: str) -> list[float]:
        return (await self.aembed_documents([text]))[0]


class FractalVectorStore(VectorStore):
    """The service's document store and search: the default collection, or ``collection``.
    Searches run at ``granularity`` (coarse, fine or auto) with ``rerank`` (none or c2f) unless
    a call says otherwise; documents are sent ``batch_size`` a request (default: the service's
    ``limits.max_texts``, read from ``/info`` once)."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        collection: str | None = None,
        granularity: Granularity = "fine",
        rerank: Rerank = "none",
        batch_size: int | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.url, self.api_key, self.collection = url, api_key, collection
        self.granularity, self.rerank = granularity, rerank
        self.batch_size, self.timeout_s = batch_size, timeout_s
        self._client = FractalClient(
            url, api_key=api_key, timeout_s=timeout_s, collection=collection
        )
        self._embeddings: FractalEmbeddings | None = None

    def __enter__(self) -> FractalVectorStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()
        if self._embeddings is not None:
            self._embeddings.close()

    @property
    def embeddings(self) -> FractalEmbeddings:
        """The same service's ``POST /embed`` (full vectors)."""
        if self._embeddings is None:
            self._embeddings = FractalEmbeddings(
                self.url, api_key=self.api_key, timeout_s=self.timeout_s
            )
        return self._embeddings

    def _client_for(self, collection: str | None) -> FractalClient:
        """A client of ``collection`` (None: the store's), over the store's connections."""
        if collection is None or collection == self.collection:
            return self._client
        return FractalClient(self._client.http, collection=collection)

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Store the texts (the service encodes them), an existing id replaced; the ids, the
        service's own where ``ids`` has none. Keywords: ``collection``, ``batch_size``; others
        are ignored."""
        texts = list(texts)
        for name, values in (("metadatas", metadatas), ("ids", ids)):
            if values is not None and len(values) != len(texts):
                raise ValueError(f"{len(texts)} texts but {len(values)} {name}")
        documents: list[dict[str, Any]] = []
        for position, text in enumerate(texts):
            document: dict[str, Any] = {"text": text}
            if ids is not None and ids[position] is not None:
                document["id"] = ids[position]
            if metadatas is not None:
                document["metadata"] = metadatas[position]
            documents.append(document)
        if not documents:
            return []
        batch_size = kwargs.get("batch_size") or self.batch_size
        if batch_size is None:
            batch_size = self.batch_size = _max_texts(self._client.info())
        client = self._client_for(kwargs.get("collection"))
        return client.add_documents(documents, batch_size=batch_size)

    def similarity_search_with_score(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """``POST /search`` for one query: the hits with their scores, best first."""
        collection = kwargs.pop("collection", None)
        options = {"k": k, "granularity": self.granularity, "rerank": self.rerank, **kwargs}
        if filter is not None:
            options["filter"] = filter
        [result] = self._client_for(collection).search_batch([query], **options)
        return [(_document(hit), hit["score"]) for hit in result["hits"]]

    def similarity_search(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Document]:
        return [doc for doc, _ in self.similarity_search_with_score(query, k, filter, **kwargs)]

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        """Cosines in [-1, 1] as relevance in [0, 1]."""
        return lambda score: (score + 1.0) / 2.0

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool:
        """``DELETE`` each document (``collection`` keyword: another collection); an id that is
        not stored is skipped. True."""
        if ids is None:
            raise ValueError("delete needs the ids to delete")
        client = self._client_for(kwargs.get("collection"))
        path = _documents_path(client.collection)
        for doc_id in ids:
            try:
                client.request("DELETE", f"{path}/{quote(doc_id, safe='')}")
            except RequestRefused as refused:
                if not _is_missing_document(refused):
                    raise
        return True

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The stored documents among ``ids``, in their order; ids not stored are skipped."""
        path = _documents_path(self.collection)
        found = []
        for doc_id in ids:
            try:
                stored = self._client.request("GET", f"{path}/{quote(doc_id, safe='')}").json()
            except RequestRefused as refused:
                if _is_missing_document(refused):
                    continue
                raise
            found.append(_document(stored))
        return found

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings | None = None,
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        url: str | None = None,
        api_key: str | None = None,
        collection: str | None = None,
        **kwargs: Any,
    ) -> FractalVectorStore:
        """A store of the service at ``url`` (required) with the texts added; ``embedding`` is
        not used (the service encodes). Other keywords go to the constructor."""
        if url is None:
            raise TypeError("FractalVectorStore.from_texts needs url=, the service's base URL")
        store = cls(url, api_key=api_key, collection=collection, **kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store
