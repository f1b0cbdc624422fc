"""``POST /v1/embeddings``: the OpenAI embeddings API, so its clients work unchanged.

``input`` is a string, a list of strings, one text as a list of token ids, or a list of such
lists, as in the OpenAI API. Token ids are the sequence the encoder reads, as the bundle's
tokenizer makes it (``tokenizer.encode(text).ids``, its special tokens included): nothing is
added or cut, and they skip the query cache. ``model`` must be the served bundle's name,
``dimensions`` one of its prefix dims (default: the full dimension), ``encoding_format``
``float`` or ``base64`` (little-endian float32, the OpenAI clients' default), and ``user`` is
ignored. Vectors are always L2-normalised, as OpenAI's are.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeGuard, cast

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field

from service.embedding import base64_float32, prefix_vectors, resolve_dims
from service.errors import ModelNotFound, error_responses
from service.limits import JsonInt, OpenAIInput, PrefixDims, ServedModel
from service.metrics import label_request
from service.routes import encodes_texts, new_router
from service.routes.embed import Usage
from service.runtime import RuntimeDep

router = new_router(tags=["openai"])


class EmbeddingsRequest(BaseModel):
    model_config = ConfigDict(strict=True)  # fields the OpenAI clients may add are ignored

    input: OpenAIInput = Field(
        description="A text, a list of texts, one text as token ids (the bundle tokenizer's "
        "ids, special tokens included; each below the vocabulary size, at most the backbone's "
        "max_tokens), or a list of such lists. At most FRACTAL_MAX_TEXTS texts of at most "
        "FRACTAL_MAX_CHARS characters."
    )
    model: Annotated[str, ServedModel()] = Field(
        description="The served bundle's name (GET /info → model); another is a 404."
    )
    dimensions: Annotated[JsonInt, PrefixDims()] | None = Field(
        None, description="One of the bundle's prefix_dims."
    )
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



def _are_texts(items: list[str] | list[int] | list[list[int]]) -> TypeGuard[list[str]]:
    return all(isinstance(item, str) for item in items)


def _are_id_lists(items: list[str] | list[int] | list[list[int]]) -> TypeGuard[list[list[int]]]:
    return all(isinstance(item, list) for item in items)

@router.post("/v1/embeddings", responses=error_responses(404, 422, 429, 503, 504))
@encodes_texts
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
        encoded = await runtime.embed([body.input])
    elif _are_texts(body.input):
        encoded = await runtime.embed(body.input)
    elif _are_id_lists(body.input):
        encoded = await runtime.embed_token_ids([tuple(map(int, ids)) for ids in body.input])
    else:
        ids = cast(list[int], body.input)  # the only shape left: one text's token ids
        encoded = await runtime.embed_token_ids([tuple(map(int, ids))])
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
