"""``/documents``: add (embed + store, committed before the answer), add with precomputed
vectors (``/documents/vectors``: store only), read, delete, and which ids are stored
(``/documents/lookup``) — in the default collection, and the same under
``/collections/{collection}`` for a named one (:mod:`service.collections`)."""

import json
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from pydantic import BaseModel, Field, field_validator

from service.errors import error_responses
from service.limits import (
    MAX_LOOKUP_IDS,
    DocumentId,
    FullVector,
    PerRequest,
    ServedBundleHash,
    Text,
)
from service.metrics import label_request
from service.routes import JSON_BODY, encodes_texts, new_router
from service.runtime import RuntimeDep


class DocumentIn(BaseModel):
    model_config = JSON_BODY

    id: DocumentId | None = Field(
        None,
        description="Unique id (at most 256 characters, not blank, not repeated within a "
        "request); generated when missing. An existing id is replaced.",
    )
    text: Text = Field(description="The text to embed and store (at most FRACTAL_MAX_CHARS).")
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="Any JSON object, returned with the document."
    )

    @field_validator("metadata")
    @classmethod
    def _finite_json(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            json.dumps(value, allow_nan=False)
        except ValueError as exc:
            raise ValueError(f"metadata must be plain JSON ({exc})") from None
        return value


class AddDocumentsRequest(BaseModel):
    model_config = JSON_BODY

    documents: Annotated[list[DocumentIn], PerRequest()] = Field(
        min_length=1, description="At most FRACTAL_MAX_TEXTS documents."
    )


class VectorDocumentIn(DocumentIn):
    vector: Annotated[list[float], FullVector()] = Field(
        description="The full, unnormalised embedding of the text by the served bundle "
        "(its dim values, all finite), e.g. from `fractal embed`."
    )


class AddVectorsRequest(BaseModel):
    model_config = JSON_BODY

    bundle_hash: Annotated[str, ServedBundleHash()] = Field(
        description="The content hash of the bundle that made the vectors (`/info`'s "
        "bundle_hash); must be the served bundle's."
    )
    documents: Annotated[list[VectorDocumentIn], PerRequest()] = Field(
        min_length=1, description="At most FRACTAL_MAX_TEXTS documents."
    )


def _stored(prefix: str) -> dict[int | str, dict]:
    """The 200 answer of the operations that store documents under ``prefix``, with OpenAPI
    links from the first id to reading and deleting that document (in the same collection)."""
    path = f"{prefix}/documents/{{doc_id}}".replace("/", "~1")
    parameters = {"doc_id": "$response.body#/ids/0"}
    if "{collection}" in prefix:
        parameters["collection"] = "$request.path.collection"
    return {
        200: {
            "description": "The documents' ids, in request order. The links say where the ids "
            "of the document routes come from.",
            "links": {
                "GetDocument": {"operationRef": f"#/paths/{path}/get", "parameters": parameters},
                "DeleteDocument": {
                    "operationRef": f"#/paths/{path}/delete",
                    "parameters": parameters,
                },
            },
        }
    }


class AddDocumentsResponse(BaseModel):
    ids: list[str] = Field(description="The documents' ids, in request order.")


class LookupRequest(BaseModel):
    model_config = JSON_BODY

    ids: list[DocumentId] = Field(
        min_length=1,
        max_length=MAX_LOOKUP_IDS,
        description=f"The document ids to look for: 1 to {MAX_LOOKUP_IDS}, each non-blank and "
        "at most 256 characters.",
    )


class LookupResponse(BaseModel):
    found: list[str] = Field(description="The given ids that are stored, in request order, once.")


class DocumentOut(BaseModel):
    id: str
    text: str
    metadata: dict[str, Any]


class DeleteDocumentResponse(BaseModel):
    id: str
    deleted: bool


def _default_collection() -> None:
    """Routes without a collection in their path serve the default collection."""
    return None


def _named_collection(
    collection: Annotated[str, Path(description="The collection's name (GET /collections).")],
) -> str:
    return collection


def _document_routes(prefix: str, collection_of: Callable[..., str | None]) -> APIRouter:
    """The document routes under ``prefix``, in the collection ``collection_of`` names.

    (This module does without ``from __future__ import annotations``: FastAPI reads the routes'
    annotations, and ``Collection`` is local to this function.)"""
    router = new_router(prefix=prefix, tags=["documents"])
    Collection = Annotated[str | None, Depends(collection_of)]

    stored = _stored(prefix)

    @router.post(
        "/documents", responses={**stored, **error_responses(404, 422, 429, 503, 504, 507)}
    )
    @encodes_texts
    async def add_documents(
        body: AddDocumentsRequest, runtime: RuntimeDep, request: Request, collection: Collection
    ) -> AddDocumentsResponse:
        """Embed and store documents; answered once the store has committed them."""
        label_request(request, dimension=str(runtime.manifest.dim))
        ids = await runtime.add_documents(
            [document.text for document in body.documents],
            [document.id for document in body.documents],
            [document.metadata for document in body.documents],
            collection=collection,
        )
        return AddDocumentsResponse(ids=ids)

    @router.post("/documents/vectors", responses={**stored, **error_responses(404, 422, 503, 507)})
    async def add_vectors(
        body: AddVectorsRequest, runtime: RuntimeDep, request: Request, collection: Collection
    ) -> AddDocumentsResponse:
        """Store documents with precomputed vectors, without encoding them; all or nothing,
        answered once the store has committed them."""
        label_request(request, dimension=str(runtime.manifest.dim))
        documents = body.documents
        ids = await runtime.add_vectors(
            [document.text for document in documents],
            [document.id for document in documents],
            [document.metadata for document in documents],
            [document.vector for document in documents],
            collection=collection,
        )
        return AddDocumentsResponse(ids=ids)

    @router.post("/documents/lookup", responses=error_responses(404, 422, 503))
    async def lookup_documents(
        body: LookupRequest, runtime: RuntimeDep, collection: Collection
    ) -> LookupResponse:
        """Which of these ids are stored, answered with one store query (to resume an ingest
        without one request per document)."""
        return LookupResponse(found=await runtime.find_documents(body.ids, collection=collection))

    @router.get("/documents/{doc_id:path}", responses=error_responses(404, 422, 503))
    async def get_document(doc_id: str, runtime: RuntimeDep, collection: Collection) -> DocumentOut:
        """A stored document's text and metadata."""
        document = await runtime.get_document(doc_id, collection)
        return DocumentOut(id=document.id, text=document.text, metadata=document.metadata)

    @router.delete("/documents/{doc_id:path}", responses=error_responses(404, 422, 503, 507))
    async def delete_document(
        doc_id: str, runtime: RuntimeDep, collection: Collection
    ) -> DeleteDocumentResponse:
        """Delete a document from the store and every index."""
        await runtime.delete_document(doc_id, collection)
        return DeleteDocumentResponse(id=doc_id, deleted=True)

    return router


router = _document_routes("", _default_collection)
collection_router = _document_routes("/collections/{collection}", _named_collection)
