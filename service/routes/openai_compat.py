"""``POST /v1/embeddings``: the OpenAI embeddings API, so its clients work unchanged.

``input`` is a string or a list of strings (token arrays are not supported), ``model`` must be
the served bundle's name, ``dimensions`` one of its prefix dims (default: the full dimension),
``encoding_format`` ``float`` or ``base64`` (little-endian float32, the OpenAI clients' default),
and ``user`` is ignored. Vectors are always L2-normalised, as OpenAI's are.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from service.embedding import base64_float32, prefix_vectors, resolve_dims
from service.errors import ModelNotFound, error_responses
from service.metrics import label_request
from service.routes.embed import Usage
from service.runtime import RuntimeDep

router = APIRouter(tags=["openai"])


class EmbeddingsRequest(BaseModel):
    input: str | list[str] = Field(description="A text or a list of texts.")
    model: str = Field(description="The served bundle's name (GET /info → model).")
    dimensions: int | None = Field(None, description="One of the bundle's prefix_dims.")
    encoding_format: Literal["float", "base64"] = "float"
    user: str | None = Field(None, description="Accepted and ignored.")


class EmbeddingObject(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str = Field(
        description="Floats, or base64 of little-endian float32 with encoding_format=base64."
    )


class EmbeddingsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingObject]
    model: str
    usage: Usage


@router.post("/v1/embeddings", responses=error_responses(404, 422, 429, 503))
async def create_embeddings(
    body: EmbeddingsRequest, runtime: RuntimeDep, request: Request
) -> EmbeddingsResponse:
    """OpenAI-compatible embeddings."""
    name = runtime.manifest.name
    if body.model != name:
        raise ModelNotFound(
            f"model {body.model!r} is not served; this service serves {name!r}", "model"
        )
    (dim,) = resolve_dims(runtime.manifest, body.dimensions, None, "dimensions")
    label_request(request, dimension=str(dim))
    if isinstance(body.input, str):
        encoded = await runtime.embed([body.input], "input", ["input"])
    else:
        encoded = await runtime.embed(body.input, "input")
    vectors = prefix_vectors(encoded.vectors, dim)
    tokens = int(encoded.tokens.sum())
    return EmbeddingsResponse(
        data=[
            EmbeddingObject(
                index=row,
                embedding=base64_float32(vector)
                if body.encoding_format == "base64"
                else vector.tolist(),
            )
            for row, vector in enumerate(vectors)
        ],
        model=name,
        usage=Usage(prompt_tokens=tokens, total_tokens=tokens),
    )
