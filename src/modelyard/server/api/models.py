"""``/api/v1/models``: model files. POST validates the directory and stores nothing when invalid.

``POST /models/pull``, ``POST /models/import`` and ``POST /models/{name}/export`` check everything
at once (a refusal is immediate and nothing is written), then queue a task (202) that the
download manager runs; follow it at ``/tasks/{id}``. ``dry_run`` on a pull answers the plan
(files, sizes, target, disk) without storing anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from modelyard.server.api.common import in_session
from modelyard.server.context import ServerContext, server_context
from modelyard.services import model_files, model_tasks
from modelyard.services.model_tasks import MAXIMUM_PATH_CHARACTERS, PullRequest
from modelyard.services.names import MAXIMUM_NAME_LENGTH
from modelyard.services.tasks import task_to_json

router = APIRouter(tags=["models"])


class ModelCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Absolute path of the model directory on the server's host.
    path: str = Field(min_length=1, max_length=MAXIMUM_PATH_CHARACTERS)
    # Default: the directory's name.
    name: str | None = Field(default=None, max_length=MAXIMUM_NAME_LENGTH)


# The service's PullRequest, and dry_run.
class PullBody(PullRequest):
    """A model to pull from a hub; with dry_run, the plan (files, sizes, target, disk) is answered
    and nothing is stored."""

    dry_run: bool = False


class ImportBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Absolute path of the bundle on the server's host.
    path: str = Field(min_length=1, max_length=MAXIMUM_PATH_CHARACTERS)
    name: str | None = Field(default=None, max_length=MAXIMUM_NAME_LENGTH)
    target_dir: str | None = Field(default=None, max_length=MAXIMUM_PATH_CHARACTERS)


class ExportBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Absolute path of the archive to write on the server's host (must not exist).
    path: str = Field(min_length=1, max_length=MAXIMUM_PATH_CHARACTERS)


def _list(session: Session) -> list[dict[str, Any]]:
    counts = model_files.deployment_counts(session)
    return [
        {**model_files.model_to_json(record), "deployment_count": counts.get(record.id, 0)}
        for record in model_files.list_models(session)
    ]


def _show(session: Session, name: str) -> dict[str, Any]:
    record = model_files.get_model(session, name)
    data = model_files.model_to_json(record, model_files.deployments_using(session, record))
    data["files"] = model_files.files_report(session, record)
    return data


def _check_free(session: Session, name: str) -> None:
    model_tasks.check_model_name_free(session, name)


def _create_pull(
    session: Session, plan: model_tasks.PullPlan, request: model_tasks.PullRequest
) -> dict[str, Any]:
    return task_to_json(model_tasks.create_pull_task(session, plan, request))


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


@router.post("/models/pull", status_code=202)
async def pull_model(body: PullBody, context: ServerContext = Depends(server_context)) -> Any:
    request: PullRequest = body
    name = model_tasks.pull_name(request)
    await in_session(context, _check_free, name)
    options = context.downloads.options
    models_root = options.models_directory(context.settings.models_dir)
    plan = await run_in_threadpool(model_tasks.plan_pull, request, options, models_root)
    if body.dry_run:
        return JSONResponse(plan.to_json(), status_code=200)
    task = await in_session(context, _create_pull, plan, request)
    context.downloads.poke()
    return task


def _create_import(session: Session, body: ImportBody, context: ServerContext) -> dict[str, Any]:
    options = context.downloads.options
    models_root = options.models_directory(context.settings.models_dir)
    task = model_tasks.create_import_task(
        session, body.path, body.name, body.target_dir, options, models_root
    )
    return task_to_json(task)


@router.post("/models/import", status_code=202)
async def import_model(body: ImportBody, context: ServerContext = Depends(server_context)) -> dict[str, Any]:
    task = await in_session(context, _create_import, body, context)
    context.downloads.poke()
    return task


def _create_export(session: Session, name: str, body: ExportBody, context: ServerContext) -> dict[str, Any]:
    return task_to_json(model_tasks.create_export_task(session, name, body.path, context.downloads.options))


@router.post("/models/{name:path}/export", status_code=202)
async def export_model(
    name: str, body: ExportBody, context: ServerContext = Depends(server_context)
) -> dict[str, Any]:
    task = await in_session(context, _create_export, name, body, context)
    context.downloads.poke()
    return task


@router.get("/models/{name:path}")
async def show_model(name: str, context: ServerContext = Depends(server_context)) -> dict[str, Any]:
    return await in_session(context, _show, name)


@router.delete("/models/{name:path}", status_code=204)
async def remove_model(name: str, context: ServerContext = Depends(server_context)) -> Response:
    await in_session(context, model_files.remove_model, name)
    return Response(status_code=204)
