"""``/api/v1/tasks``: model tasks (pulls, imports, exports) with per-file progress; cancel, resume."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from sqlalchemy.orm import Session

from modelyard.server.api.common import in_session
from modelyard.server.context import ServerContext, server_context
from modelyard.services import tasks

router = APIRouter(tags=["tasks"])


def _list(session: Session, context: ServerContext) -> list[dict[str, Any]]:
    return [tasks.task_to_json(task, context.downloads.live(task.id)) for task in tasks.list_tasks(session)]


def _show(session: Session, task_id: int, context: ServerContext) -> dict[str, Any]:
    return tasks.task_to_json(tasks.get_task(session, task_id), context.downloads.live(task_id))


def _cancel(session: Session, task_id: int) -> dict[str, Any]:
    return tasks.task_to_json(tasks.cancel_task(session, task_id))


def _resume(session: Session, task_id: int) -> dict[str, Any]:
    return tasks.task_to_json(tasks.resume_task(session, task_id))


@router.get("/tasks")
async def list_tasks(context: ServerContext = Depends(server_context)) -> list[dict[str, Any]]:
    return await in_session(context, _list, context)


@router.get("/tasks/{task_id}")
async def show_task(task_id: int, context: ServerContext = Depends(server_context)) -> dict[str, Any]:
    return await in_session(context, _show, task_id, context)


@router.post("/tasks/{task_id}/cancel")
async def cancel_task(task_id: int, context: ServerContext = Depends(server_context)) -> dict[str, Any]:
    task = await in_session(context, _cancel, task_id)
    context.downloads.cancel(task_id)
    return task


@router.post("/tasks/{task_id}/resume", status_code=202)
async def resume_task(task_id: int, context: ServerContext = Depends(server_context)) -> dict[str, Any]:
    task = await in_session(context, _resume, task_id)
    context.downloads.poke()
    return task
