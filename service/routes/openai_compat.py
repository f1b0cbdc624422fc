"""``POST /v1/embeddings``, ``GET /v1/models`` and ``GET /v1/models/{model}``: the OpenAI
embeddings and models APIs, so their clients work unchanged.

``input`` is a string, a list of strings, one text as a list of token ids, or a list of such
lists, as in the OpenAI API. Token ids are the sequence the encoder reads, as the bundle's
tokenizer makes it (``tokenizer.encode(text).ids``, its special tokens included): nothing is
added or cut, and they skip the query cache. ``model`` must be the served bundle's name,
``dimensions`` one of its prefix dims (default: the full dimension), ``encoding_format``
``float`` or ``base64`` (little-endian float32, the OpenAI clients' default), and ``user`` is
ignored. Vectors are always L2-normalised, as OpenAI's are.

The models are the one model ``model`` accepts (:func:`served_model_name`): the bundle's name,
``created`` when the bundle was made (its manifest's ``created_at``; the manifest file's
modification time if that is not an ISO 8601 time), owned by ``fractal``. Like
``/v1/embeddings``, they answer any valid API key (a ``read`` one is enough).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Literal, TypeGuard, cast

from fastapi import Path, Request
from pydantic import BaseModel, ConfigDict, Field

from bundle import MANIFEST_FILE
from service.embedding import base64_float32, prefix_vectors, resolve_dims
from service.errors import ModelNotFound, error_responses
from service.limits import JsonInt, OpenAIInput, PrefixDims, ServedModel
from service.metrics import label_request
from service.routes import encodes_texts, new_router
from service.routes.embed import Usage
from service.runtime import Runtime, RuntimeDep

router = new_router(tags=["openai"])
OWNER = "fractal"


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


class ModelObject(BaseModel):
    id: str = Field(description="The served bundle's name: the model /v1/embeddings takes.")
    object: Literal["model"] = "model"
    created: int = Field(description="When the bundle was made, in Unix seconds.")
    owned_by: str = Field(description=f"Always {OWNER!r}.")


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelObject] = Field(description="The one model served.")


def served_model_name(runtime: Runtime, model: str, param: str) -> str:
    """The served bundle's name if ``model`` is it; OpenAI's 404 ``model_not_found`` if not."""
    name = runtime.manifest.name
    if model != name:
        raise ModelNotFound(f"model {model!r} is not served; this service serves {name!r}", param)
    return name


def _created(runtime: Runtime) -> int:
    """When the served bundle was made, in Unix seconds (see the module docstring)."""
    try:
        made = datetime.fromisoformat(runtime.manifest.created_at)
    except ValueError:
        return int((runtime.settings.bundle_dir / MANIFEST_FILE).stat().st_mtime)
    if made.tzinfo is None:
        made = made.replace(tzinfo=timezone.utc)
    return int(made.timestamp())


def _served_model(runtime: Runtime) -> ModelObject:
    return ModelObject(id=runtime.manifest.name, created=_created(runtime), owned_by=OWNER)


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
    name = served_model_name(runtime, body.model, "model")
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


@router.get("/v1/models", responses=error_responses(503))
async def list_models(runtime: RuntimeDep) -> ModelList:
    """OpenAI-compatible model list: the one model served."""
    return ModelList(data=[_served_model(runtime)])


@router.get("/v1/models/{model:path}", responses=error_responses(404, 422, 503))
async def retrieve_model(
    model: Annotated[
        str,
        ServedModel(),
        Path(description="The served bundle's name (GET /info → model); another is a 404."),
    ],
    runtime: RuntimeDep,
) -> ModelObject:
    """OpenAI-compatible model: the served one; another name is a 404."""
    served_model_name(runtime, model, "model")
    return _served_model(runtime)
