"""``/documents``: add (embed + store, committed before the answer), add with precomputed
vectors (``/documents/vectors``: store only), read and delete."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field, field_validator

from service.errors import error_responses
from service.limits import DocumentId, FullVector, PerRequest, ServedBundleHash, Text
from service.metrics import label_request
from service.routes import JSON_BODY
from service.runtime import RuntimeDep

router = APIRouter(tags=["documents"])


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


_DOCUMENT = "#/paths/~1documents~1{doc_id}/"
_FIRST_ID = {"doc_id": "$response.body#/ids/0"}
STORED = {
    200: {
        "description": "The documents' ids, in request order. The links say where the ids of "
        "/documents/{doc_id} come from.",
        "links": {
            "GetDocument": {"operationRef": _DOCUMENT + "get", "parameters": _FIRST_ID},
            "DeleteDocument": {"operationRef": _DOCUMENT + "delete", "parameters": _FIRST_ID},
        },
    }
}
"""The 200 answer of the operations that store documents, with OpenAPI links from the first id
to reading and deleting that document."""


class AddDocumentsResponse(BaseModel):
    ids: list[str] = Field(description="The documents' ids, in request order.")


class DocumentOut(BaseModel):
    id: str
    text: str
    metadata: dict[str, Any]


class DeleteDocumentResponse(BaseModel):
    id: str
    deleted: bool


@router.post("/documents", responses={**STORED, **error_responses(422, 429, 503)})
async def add_documents(
    body: AddDocumentsRequest, runtime: RuntimeDep, request: Request
) -> AddDocumentsResponse:
    """Embed and store documents; answered once the store has committed them."""
    label_request(request, dimension=str(runtime.manifest.dim))
    ids = await runtime.add_documents(
        [document.text for document in body.documents],
        [document.id for document in body.documents],
        [document.metadata for document in body.documents],
    )
    return AddDocumentsResponse(ids=ids)


@router.post("/documents/vectors", responses={**STORED, **error_responses(422, 503)})
async def add_vectors(
    body: AddVectorsRequest, runtime: RuntimeDep, request: Request
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
    )
    return AddDocumentsResponse(ids=ids)


@router.get("/documents/{doc_id:path}", responses=error_responses(404, 422, 503))
async def get_document(doc_id: str, runtime: RuntimeDep) -> DocumentOut:
    """A stored document's text and metadata."""
    document = await runtime.get_document(doc_id)
    return DocumentOut(id=document.id, text=document.text, metadata=document.metadata)


@router.delete("/documents/{doc_id:path}", responses=error_responses(404, 422, 503))
async def delete_document(doc_id: str, runtime: RuntimeDep) -> DeleteDocumentResponse:
    """Delete a document from the store and every index."""
    await runtime.delete_document(doc_id)
    return DeleteDocumentResponse(id=doc_id, deleted=True)
