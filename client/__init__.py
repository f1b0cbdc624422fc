"""The Python client of the Fractal service: synchronous and asynchronous, with typed results.

    from client import FractalClient

    with FractalClient("http://127.0.0.1:8000", api_key="…") as fractal:
        fractal.add_documents(["move funds to savings", "reset my PIN"], progress=True)
        result = fractal.search("send money", k=5, granularity="coarse")
        print(result.route.dimension, result.timings_ms.search, result.hits[0].text)

    async with AsyncFractalClient("http://127.0.0.1:8000") as fractal:
        vectors = (await fractal.embed(["send money"], dims=64)).at(64)

Both clients have the same methods (:class:`client.operations.Operations`); the asynchronous
one's return coroutines. 429 answers are retried after the service's ``Retry-After`` and 503
answers with backoff (:mod:`client.retry`); any other refusal raises
:class:`~client.errors.RequestRefused` with the service's message. The client needs ``httpx``
(and ``tqdm`` for progress bars): ``pip install 'fractal[client]'``. LangChain's
``Embeddings`` and ``VectorStore`` over it are in :mod:`client.langchain_store`.
"""

from __future__ import annotations

from client.errors import RequestRefused
from client.operations import LOOKUP_BATCH, Operations
from client.results import Collection, Document, Embeddings, Hit, Route, SearchResult, Timings
from client.retry import RetryPolicy
from client.transport import DEFAULT_TIMEOUT_S, AsyncTransport, SyncTransport


class FractalClient(Operations, SyncTransport):
    """The service's API as blocking methods. Build it from a base URL (it then owns an
    :class:`httpx.Client`) or from an existing client (it then leaves closing to the caller)."""


class AsyncFractalClient(Operations, AsyncTransport):
    """The service's API as coroutines, on an :class:`httpx.AsyncClient`."""


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "LOOKUP_BATCH",
    "AsyncFractalClient",
    "Collection",
    "Document",
    "Embeddings",
    "FractalClient",
    "Hit",
    "RequestRefused",
    "RetryPolicy",
    "Route",
    "SearchResult",
    "Timings",
]
