"""Model tasks as the API shows and steers them: list, show (with live rates), cancel, resume.

Usage::

    task = get_task(session, 7)
    task_to_json(task, live=context.downloads.live(7))
    cancel_task(session, 7)        # then context.downloads.cancel(7)
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelyard.errors import Conflict, NotFound
from modelyard.store.tables import ModelFile, ModelTask, utc_now

MAXIMUM_LISTED = 200


def get_task(session: Session, task_id: int) -> ModelTask:
    task = session.get(ModelTask, task_id)
    if task is None:
        raise NotFound(f"no task {task_id}", hint="list them with `modelyard tasks list`")
    return task


def list_tasks(session: Session, limit: int = MAXIMUM_LISTED) -> list[ModelTask]:
    """The newest tasks first."""
    return list(session.scalars(select(ModelTask).order_by(ModelTask.id.desc()).limit(limit)))


def cancel_task(session: Session, task_id: int) -> ModelTask:
    """A queued task is cancelled at once; a running one at its next chunk (the manager sees the flag)."""
    task = get_task(session, task_id)
    if task.state not in ("queued", "running"):
        raise Conflict(
            f"task {task_id} is already {task.state}", hint="only queued or running tasks can be cancelled"
        )
    task.cancel_requested = True
    if task.state == "queued":
        task.state, task.reason, task.finished_at = "cancelled", "cancelled by request", utc_now()
        _pull_model_incomplete(session, task)
    session.commit()
    return task


def _pull_model_incomplete(session: Session, task: ModelTask) -> None:
    if task.kind != "pull":
        return
    model = session.scalar(select(ModelFile).where(ModelFile.name == task.model_name))
    if model is not None and model.state == "downloading":
        model.state = "incomplete"
        model.reasons = [
            "download cancelled by request",
            f"resume it with `modelyard tasks resume {task.id}`",
        ]


def resume_task(session: Session, task_id: int) -> ModelTask:
    """Queue a failed or cancelled task again; a pull continues from the bytes on disk."""
    task = get_task(session, task_id)
    if task.state not in ("failed", "cancelled"):
        raise Conflict(
            f"task {task_id} is {task.state}", hint="only failed or cancelled tasks can be resumed"
        )
    if task.kind == "pull":
        model = session.scalar(select(ModelFile).where(ModelFile.name == task.model_name))
        if model is None:
            raise Conflict(
                f"the model {task.model_name!r} of task {task_id} was removed",
                hint="pull it again with `modelyard models pull`",
            )
        model.state, model.reasons = "downloading", []
    task.state, task.cancel_requested, task.finished_at = "queued", False, None
    task.reason = "resumed by request"
    for entry in task.files or []:
        if entry.get("state") == "failed":
            entry["state"], entry["retries"], entry["restarts"] = "pending", 0, 0
    task.files = [dict(entry) for entry in task.files or []]
    session.commit()
    return task


def task_to_json(task: ModelTask, live: dict[str, Any] | None = None) -> dict[str, Any]:
    """A task for the API: totals, each file's progress and, while it runs here, rates and time left."""
    live_files: dict[str, dict[str, Any]] = (live or {}).get("files", {})
    files = []
    for entry in task.files or []:
        path = str(entry["path"])
        rates = live_files.get(path, {})
        files.append(
            {
                "path": path,
                "size": entry["size"],
                "bytes": entry.get("bytes", 0),
                "state": entry.get("state", "pending"),
                "sha256": entry.get("sha256"),
                "git_blob_id": entry.get("git_blob_id"),
                "verified_sha256": entry.get("verified_sha256"),
                "retries": entry.get("retries", 0),
                "restarts": entry.get("restarts", 0),
                "error": entry.get("error"),
                "rate_bytes_per_second": rates.get("rate_bytes_per_second"),
                "seconds_left": rates.get("seconds_left"),
            }
        )
    done = (
        sum(min(int(item["bytes"] or 0), int(item["size"])) for item in files) if files else task.done_bytes
    )
    return {
        "id": task.id,
        "kind": task.kind,
        "model": task.model_name,
        "state": task.state,
        "reason": task.reason,
        "source": task.source,
        "target": task.target_path,
        "options": task.options,
        "total_bytes": task.total_bytes,
        "done_bytes": done,
        "fraction_done": (done / task.total_bytes)
        if task.total_bytes
        else (1.0 if task.state == "completed" else 0.0),
        "phase": (live or {}).get("phase") or None,
        "rate_bytes_per_second": (live or {}).get("rate_bytes_per_second"),
        "seconds_left": (live or {}).get("seconds_left"),
        "cancel_requested": task.cancel_requested,
        "run_count": task.run_count,
        "files": files,
        "created_at": task.created_at.isoformat(),
        "started_at": task.started_at.isoformat() if task.started_at else None,
        "finished_at": task.finished_at.isoformat() if task.finished_at else None,
    }
