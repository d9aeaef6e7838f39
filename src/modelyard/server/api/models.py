"""``/api/v1/models``: model files. POST validates the directory and stores nothing when invalid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from modelyard.server.api.common import in_session
from modelyard.server.context import ServerContext, server_context
from modelyard.services import model_files
from modelyard.services.names import MAXIMUM_NAME_LENGTH

router = APIRouter(tags=["models"])

# PATH_MAX on Linux.
MAXIMUM_PATH_CHARACTERS = 4096


class ModelCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Absolute path of the model directory on the server's host.
    path: str = Field(min_length=1, max_length=MAXIMUM_PATH_CHARACTERS)
    # Default: the directory's name.
    name: str | None = Field(default=None, max_length=MAXIMUM_NAME_LENGTH)


def _list(session: Session) -> list[dict[str, Any]]:
    counts = model_files.deployment_counts(session)
    return [
        {**model_files.model_to_json(record), "deployment_count": counts.get(record.id, 0)}
        for record in model_files.list_models(session)
    ]


def _show(session: Session, name: str) -> dict[str, Any]:
    record = model_files.get_model(session, name)
    return model_files.model_to_json(record, model_files.deployments_using(session, record))


def _create(session: Session, name: str | None, path: str) -> dict[str, Any]:
    record = model_files.register_model(session, name, Path(path))
    return model_files.model_to_json(record, [])


@router.get("/models")
async def list_models(context: ServerContext = Depends(server_context)) -> list[dict[str, Any]]:
    return await in_session(context, _list)


@router.post("/models", status_code=201)
async def create_model(
    request: ModelCreate, context: ServerContext = Depends(server_context)
) -> dict[str, Any]:
    return await in_session(context, _create, request.name, request.path)


@router.get("/models/{name:path}")
async def show_model(name: str, context: ServerContext = Depends(server_context)) -> dict[str, Any]:
    return await in_session(context, _show, name)


@router.delete("/models/{name:path}", status_code=204)
async def remove_model(name: str, context: ServerContext = Depends(server_context)) -> Response:
    await in_session(context, model_files.remove_model, name)
    return Response(status_code=204)
