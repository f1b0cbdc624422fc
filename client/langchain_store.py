"""LangChain over the Fractal service: an ``Embeddings`` and a ``VectorStore``.

    from client.langchain_store import FractalEmbeddings, FractalVectorStore

    store = FractalVectorStore("http://127.0.0.1:8000", granularity="coarse")
    store.add_texts(["move funds to savings"], metadatas=[{"src": "faq"}], ids=["faq-1"])
    store.similarity_search_with_score("send money", k=3, filter={"key": "src", "eq": "faq"})
    store.similarity_search("send money", granularity="fine", rerank="c2f", collection="news")
    retriever = store.as_retriever(search_kwargs={"k": 5, "granularity": "auto"})

    FractalEmbeddings("http://127.0.0.1:8000", dims=64).embed_query("send money")

Both run on :class:`~client.FractalClient` (and :class:`~client.AsyncFractalClient` for the
embeddings' async forms). The service encodes: the store sends texts (``POST /documents``) and
queries (``GET /search``), never vectors, so the ``embedding`` that LangChain's constructors take
is not used. A search's ``granularity``, ``rerank``, ``filter`` (the service's filter grammar)
and ``collection`` override the store's defaults for that call; ``index``, ``shortlist_dim`` and
``scoring`` go to the service as they are. Scores are the service's cosines. A refusal raises
:class:`~client.RequestRefused` with the service's message; 429 and 503 are retried as the
client does. Installed with the ``langchain`` extra.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from client import DEFAULT_TIMEOUT_S, AsyncFractalClient, FractalClient, RequestRefused
from client.operations import Granularity, Rerank


def _is_missing_document(refused: RequestRefused) -> bool:
    """A 404 naming the document (a missing collection names ``collection`` instead)."""
    return refused.status_code == 404 and refused.param == "id"


class FractalEmbeddings(Embeddings):
    """The service's ``POST /embed``: the full vector of each text, or its ``dims`` prefix
    (a trained prefix, re-normalised), ``batch_size`` texts a request (default: the service's
    ``limits.max_texts``)."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        dims: int | None = None,
        batch_size: int | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.url, self.api_key, self.dims = url, api_key, dims
        self.batch_size, self.timeout_s = batch_size, timeout_s
        self._client = FractalClient(url, api_key=api_key, timeout_s=timeout_s)

    def close(self) -> None:
        self._client.close()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        answer = self._client.embed(texts, dims=self.dims, batch_size=self.batch_size)
        return answer.at(self.dims)

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """``embed_documents`` on the running event loop. It opens a client for the call: an
        ``httpx.AsyncClient`` belongs to the loop it first ran on, and LangChain's callers may
        use a new loop each time (``asyncio.run``)."""
        async with AsyncFractalClient(
            self.url, api_key=self.api_key, timeout_s=self.timeout_s
        ) as client:
            answer = await client.embed(texts, dims=self.dims, batch_size=self.batch_size)
        return answer.at(self.dims)

    async def aembed_query(self, text: str) -> list[float]:
        return (await self.aembed_documents([text]))[0]


class FractalVectorStore(VectorStore):
    """The service's document store and search: the default collection, or ``collection``.
    Searches run at ``granularity`` (coarse, fine or auto) with ``rerank`` (none or c2f) unless
    a call says otherwise; documents are sent ``batch_size`` a request (default: the service's
    ``limits.max_texts``)."""

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
        batch_size = kwargs.get("batch_size") or self.batch_size or self._max_texts()
        return self._client.add_documents(
            documents, collection=kwargs.get("collection"), batch_size=batch_size
        )

    def _max_texts(self) -> int:
        """The service's texts per request (``/info``, read once by the client)."""
        if self._client.max_texts is None:
            self._client.info()
        return self._client.max_texts or 1

    def similarity_search_with_score(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """``GET /search`` for one query: the hits with their scores, best first."""
        options = {"granularity": self.granularity, "rerank": self.rerank, **kwargs}
        result = self._client.search(query, k=k, filter=filter, **options)
        return [
            (Document(id=hit.id, page_content=hit.text, metadata=hit.metadata), hit.score)
            for hit in result.hits
        ]

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
        for doc_id in ids:
            try:
                self._client.delete_document(doc_id, collection=kwargs.get("collection"))
            except RequestRefused as refused:
                if not _is_missing_document(refused):
                    raise
        return True

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The stored documents among ``ids``, in their order; ids not stored are skipped."""
        found = []
        for doc_id in ids:
            try:
                stored = self._client.get_document(doc_id)
            except RequestRefused as refused:
                if _is_missing_document(refused):
                    continue
                raise
            found.append(Document(id=stored.id, page_content=stored.text, metadata=stored.metadata))
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
