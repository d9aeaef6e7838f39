"""``/api/v1/models``: model files. POST validates the directory and stores nothing when invalid.

``POST /models`` with ``worker`` registers a model whose files are on that worker of the cluster
(inspected there, not on the server); every model lists ``workers``: its copy on each worker
(``verified``, ``present``, ``missing``, ...). ``POST /models/{name}/push`` queues one push task
per worker (``cluster/model_push.py``).

``POST /models/pull``, ``POST /models/import`` and ``POST /models/{name}/export`` check everything
at once (a refusal is immediate and nothing is written), then queue a task (202) that the
download manager runs; follow it at ``/tasks/{id}``. ``dry_run`` on a pull answers the plan
(files, sizes, target, disk) without storing anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from modelyard.errors import Conflict, InvalidInput, InvalidModelDirectory, NotFound
from modelyard.server.api.common import in_session
from modelyard.server.context import ServerContext, server_context
from modelyard.services import model_files, model_tasks, worker_models
from modelyard.services.model_tasks import MAXIMUM_PATH_CHARACTERS, PullRequest
from modelyard.services.names import MAXIMUM_NAME_LENGTH
from modelyard.services.tasks import task_to_json

router = APIRouter(tags=["models"])


class ModelCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Absolute path of the model directory on the server's host (on ``worker``'s, with one).
    path: str = Field(min_length=1, max_length=MAXIMUM_PATH_CHARACTERS)
    # Default: the directory's name.
    name: str | None = Field(default=None, max_length=MAXIMUM_NAME_LENGTH)
    # A worker of the cluster that has the files (the server's host need not): checked there.
    worker: str | None = Field(default=None, min_length=1, max_length=MAXIMUM_NAME_LENGTH)


class BundlePushBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Absolute path of a bundle (``models export``) on the server's host.
    bundle: str = Field(min_length=1, max_length=MAXIMUM_PATH_CHARACTERS)
    workers: list[Annotated[str, Field(min_length=1, max_length=MAXIMUM_NAME_LENGTH)]] = Field(
        min_length=1, max_length=256
    )
    # Default: the bundle's.
    name: str | None = Field(default=None, max_length=MAXIMUM_NAME_LENGTH)
    # Absolute, on the workers; default: <models root>/<name>.
    target_dir: str | None = Field(default=None, max_length=MAXIMUM_PATH_CHARACTERS)


class PushBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Worker names (``modelyard workers``); or ``all``: every ready worker without a verified copy.
    workers: list[Annotated[str, Field(min_length=1, max_length=MAXIMUM_NAME_LENGTH)]] = Field(
        default_factory=list, max_length=256
    )
    all: bool = False


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


def _ready_workers(context: ServerContext) -> set[str] | None:
    """The ready workers' names on a cluster; None on a single host."""
    if context.cluster is None:
        return None
    return {status.worker.name for status in context.cluster.statuses() if status.state == "ready"}


def _list(session: Session, ready: set[str] | None) -> list[dict[str, Any]]:
    counts = model_files.deployment_counts(session)
    copies = worker_models.all_worker_copies(session, ready)
    return [
        {
            **model_files.model_to_json(record),
            "deployment_count": counts.get(record.id, 0),
            "workers": copies.get(record.id, []),
        }
        for record in model_files.list_models(session)
    ]


def _show(session: Session, name: str, ready: set[str] | None) -> dict[str, Any]:
    record = model_files.get_model(session, name)
    data = model_files.model_to_json(record, model_files.deployments_using(session, record))
    data["files"] = model_files.files_report(session, record)
    data["workers"] = worker_models.worker_copies(session, record, ready)
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


def _create_on_worker(
    session: Session, name: str | None, path: str, worker: str, inspection: dict[str, Any]
) -> dict[str, Any]:
    record = worker_models.register_on_worker(session, name, path, worker, inspection)
    return model_files.model_to_json(record, [])


def _inspect_on_worker(context: ServerContext, worker: str, path: str) -> dict[str, Any]:
    """The inspection of ``path`` on ``worker`` (blocking: a Ray task there)."""
    from modelyard.cluster.model_copies import inspect_on_worker

    cluster = context.cluster
    if cluster is None:
        raise InvalidInput(
            "--worker needs a cluster: this server runs no workers",
            hint="start the server with `modelyard serve --cluster`, or leave --worker out",
        )
    try:
        answer: dict[str, Any] = cluster.run_on(worker, inspect_on_worker, path)
    except LookupError as error:
        ready = sorted(_ready_workers(context) or ())
        raise NotFound(
            f"no ready worker named {worker!r}",
            hint=f"ready workers: {', '.join(ready) or 'none'} (see `modelyard workers`)",
        ) from error
    except TimeoutError as error:
        raise Conflict(str(error), hint="check the worker (`modelyard workers`), then add again") from error
    return answer


@router.get("/models")
async def list_models(context: ServerContext = Depends(server_context)) -> list[dict[str, Any]]:
    return await in_session(context, _list, _ready_workers(context))


@router.post("/models", status_code=201)
async def create_model(
    request: ModelCreate, context: ServerContext = Depends(server_context)
) -> dict[str, Any]:
    if request.worker is None:
        created = await in_session(context, _create, request.name, request.path)
    else:
        if not Path(request.path).is_absolute():
            raise InvalidModelDirectory(
                f"model path {request.path!r} is relative; the worker cannot know what it is relative to",
                hint="give the absolute path on the worker",
            )
        inspection = await run_in_threadpool(_inspect_on_worker, context, request.worker, request.path)
        created = await in_session(
            context, _create_on_worker, request.name, request.path, request.worker, inspection
        )
    if context.model_survey is not None:
        context.model_survey.poke()
    return created


def _create_push(session: Session, name: str, body: PushBody, context: ServerContext) -> list[dict[str, Any]]:
    if context.cluster is None:
        raise InvalidInput(
            "this server runs no cluster, so it has no workers to push to",
            hint="pushes run on `modelyard serve --cluster`",
        )
    tasks = worker_models.create_push_tasks(
        session,
        name,
        list(body.workers),
        ready=sorted(_ready_workers(context) or ()),
        every_worker=body.all,
        options=context.downloads.options,
    )
    return [task_to_json(task) for task in tasks]


def _create_bundle_push(
    session: Session, body: BundlePushBody, context: ServerContext
) -> list[dict[str, Any]]:
    if context.cluster is None:
        raise InvalidInput(
            "this server runs no cluster, so it has no workers to push to",
            hint="import the bundle here instead: modelyard models import FILE",
        )
    options = context.downloads.options
    tasks = worker_models.create_bundle_push_tasks(
        session,
        body.bundle,
        name=body.name,
        target_dir=body.target_dir,
        workers=list(body.workers),
        ready=sorted(_ready_workers(context) or ()),
        models_root=options.models_directory(context.settings.models_dir),
    )
    return [task_to_json(task) for task in tasks]


@router.post("/models/push", status_code=202)
async def push_bundle(
    body: BundlePushBody, context: ServerContext = Depends(server_context)
) -> list[dict[str, Any]]:
    """A bundle's files to workers: its model registered as on the workers only, one push task per worker."""
    tasks = await in_session(context, _create_bundle_push, body, context)
    context.downloads.poke()
    if context.model_survey is not None:
        context.model_survey.poke()
    return tasks


@router.post("/models/{name:path}/push", status_code=202)
async def push_model(
    name: str, body: PushBody, context: ServerContext = Depends(server_context)
) -> list[dict[str, Any]]:
    """Copy the model's files to workers: one task per worker (follow each at ``/tasks/{id}``)."""
    tasks = await in_session(context, _create_push, name, body, context)
    context.downloads.poke()
    return tasks


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
    return await in_session(context, _show, name, _ready_workers(context))


@router.delete("/models/{name:path}", status_code=204)
async def remove_model(name: str, context: ServerContext = Depends(server_context)) -> Response:
    await in_session(context, model_files.remove_model, name)
    if context.model_survey is not None:
        context.model_survey.poke()
    return Response(status_code=204)
