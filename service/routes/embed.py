"""``POST /embed``: several resolutions of each text in one answer."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Request
from pydantic import BaseModel, Field

from service.embedding import prefix_vectors, resolve_dims
from service.errors import error_responses
from service.limits import JsonInt, PrefixDims, TextList
from service.metrics import label_request
from service.routes import JSON_BODY, encodes_texts, new_router
from service.runtime import RuntimeDep

router = new_router(tags=["embeddings"])


class EmbedRequest(BaseModel):
    model_config = JSON_BODY

    texts: TextList = Field(
        min_length=1,
        description="Texts to embed: non-blank, at most FRACTAL_MAX_TEXTS of at most "
        "FRACTAL_MAX_CHARS characters each.",
    )
    dims: Annotated[JsonInt | list[JsonInt], PrefixDims()] | None = Field(
        None,
        description="Prefix dimension(s) to return, each one of the bundle's prefix_dims "
        "(GET /info), without repeats. Default: the full dimension. Not with granularity.",
    )
    granularity: Literal["coarse", "fine"] | None = Field(
        None, description="Instead of dims: the bundle's coarse or fine dimension."
    )
    normalize: bool = Field(
        True,
        description="L2-normalise each prefix on its own; false returns the raw prefix slice.",
    )


class PrefixEmbedding(BaseModel):
    dim: int
    vector: list[float]


class TextEmbeddings(BaseModel):
    index: int = Field(description="Position of the text in the request.")
    embeddings: list[PrefixEmbedding] = Field(description="One vector per requested dim.")


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbedResponse(BaseModel):
    model: str
    dims: list[int]
    normalized: bool
    data: list[TextEmbeddings]
    usage: Usage


@router.post("/embed", responses=error_responses(422, 429, 503, 504))
@encodes_texts
async def embed(body: EmbedRequest, runtime: RuntimeDep, request: Request) -> EmbedResponse:
    """Embed texts at one or several prefix dimensions."""
    dims = resolve_dims(runtime.manifest, body.dims, body.granularity)
    label_request(request, granularity=body.granularity or "", dimension=",".join(map(str, dims)))
    encoded = await runtime.embed(body.texts)
    prefixes = [(dim, prefix_vectors(encoded.vectors, dim, body.normalize)) for dim in dims]
    tokens = int(encoded.tokens.sum())
    return EmbedResponse(
        model=runtime.manifest.name,
        dims=dims,
        normalized=body.normalize,
        data=[
            TextEmbeddings(
                index=row,
                embeddings=[
                    PrefixEmbedding(dim=dim, vector=vectors[row].tolist())
                    for dim, vectors in prefixes
                ],
            )
            for row in range(len(body.texts))
        ],
        usage=Usage(prompt_tokens=tokens, total_tokens=tokens),
    )
