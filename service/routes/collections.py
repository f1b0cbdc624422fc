"""``/collections``: create, list and delete named collections (:mod:`service.collections`).

Each named collection has its own store, indexes, snapshots and metrics label; its documents
are under ``/collections/{collection}/documents`` and ``/search`` takes ``collection``. Deleting
one asks for its name again in the body, so that a mistyped URL cannot delete the wrong one.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

from fastapi import Path
from pydantic import BaseModel, Field

from service.access import covers
from service.collections import DEFAULT_NAME, NAME_RULE, HostedCollection
from service.errors import InvalidRequest, error_responses
from service.limits import BuiltIndex
from service.routes import JSON_BODY, new_router
from service.runtime import RuntimeDep

router = new_router(tags=["collections"])

IndexKind = Annotated[Literal["exact", "hnsw", "pq"], BuiltIndex()]
NAME_REGEX = r"^[a-z0-9][a-z0-9_-]{0,62}$"


class CreateCollectionRequest(BaseModel):
    model_config = JSON_BODY

    name: str = Field(pattern=NAME_REGEX, description=f"The collection's name: {NAME_RULE}.")
    index_kinds: list[IndexKind] | None = Field(
        None,
        min_length=1,
        max_length=3,
        json_schema_extra={"uniqueItems": True},
        description="Index kinds built at every prefix, each once, among those the service "
        "builds (default: the service's FRACTAL_INDEX_KINDS).",
    )


class DeleteCollectionRequest(BaseModel):
    model_config = JSON_BODY

    name: str = Field(description="The collection's name again, as a confirmation.")


class CollectionOut(BaseModel):
    name: str
    default: bool = Field(description="Whether this is the unnamed default collection.")
    index_kinds: list[str]
    documents: int


class CollectionList(BaseModel):
    collections: list[CollectionOut]


class DeleteCollectionResponse(BaseModel):
    name: str
    deleted: bool


def _out(hosted: HostedCollection) -> CollectionOut:
    return CollectionOut(
        name=hosted.name,
        default=hosted.name == DEFAULT_NAME,
        index_kinds=list(hosted.index_kinds),
        documents=hosted.stats().documents,
    )


@router.post("/collections", status_code=201, responses=error_responses(409, 422, 503, 507))
async def create_collection(body: CreateCollectionRequest, runtime: RuntimeDep) -> CollectionOut:
    """Create an empty named collection."""
    kinds = tuple(body.index_kinds) if body.index_kinds is not None else None
    hosted = await runtime.create_collection(body.name, kinds)
    return await asyncio.to_thread(_out, hosted)


@router.get("/collections", responses=error_responses(503))
async def list_collections(runtime: RuntimeDep) -> CollectionList:
    """The default collection and the named ones, with their document counts: those the
    request's API key covers."""

    def listed() -> list[CollectionOut]:  # the backend may be asked: off the event loop
        return [_out(hosted) for hosted in runtime.collections.all() if covers(hosted.name)]

    return CollectionList(collections=await asyncio.to_thread(listed))


@router.delete("/collections/{name}", responses=error_responses(404, 422, 503))
async def delete_collection(
    name: Annotated[str, Path(pattern=NAME_REGEX, description="The named collection to delete.")],
    body: DeleteCollectionRequest,
    runtime: RuntimeDep,
) -> DeleteCollectionResponse:
    """Delete a named collection, its documents and indexes, once the requests using it end."""
    if body.name != name:
        raise InvalidRequest(
            f"the body names {body.name!r}, the path {name!r}: repeat the collection's name "
            "in the body to delete it",
            "name",
        )
    await runtime.delete_collection(name)
    return DeleteCollectionResponse(name=name, deleted=True)
