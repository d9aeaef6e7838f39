"""The manager's reads and writes of task rows (``model_tasks``) and of the models they fill.

Every function opens its own short session, so that download threads never hold one for long.

Usage::

    task = load_task(database, task_id)
    write_progress(database, {task_id: (files, done_bytes)})
    finish_task(database, task_id, "failed", "model-00002.safetensors: SHA-256 ...", files, done)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from modelyard.store.database import Database
from modelyard.store.tables import ModelFile, ModelTask, utc_now

ACTIVE_STATES = ("queued", "running")
FINAL_STATES = ("completed", "failed", "cancelled")


@dataclass(frozen=True)
class TaskData:
    """A task row, detached from its session, as a runner reads it."""

    id: int
    kind: str
    model_name: str
    source: str
    target_path: str
    options: dict[str, Any]
    files: list[dict[str, Any]]
    cancel_requested: bool


def load_task(database: Database, task_id: int) -> TaskData | None:
    with database.session() as session:
        task = session.get(ModelTask, task_id)
        if task is None:
            return None
        return TaskData(
            id=task.id,
            kind=task.kind,
            model_name=task.model_name,
            source=task.source,
            target_path=task.target_path,
            options=dict(task.options or {}),
            files=[dict(entry) for entry in task.files or []],
            cancel_requested=task.cancel_requested,
        )


def requeue_interrupted(database: Database) -> list[int]:
    """Tasks left ``running`` by a server that stopped (or was killed): back to ``queued``."""
    with database.session() as session:
        tasks = list(session.scalars(select(ModelTask).where(ModelTask.state == "running")))
        for task in tasks:
            task.state = "queued"
            task.reason = "the server stopped while it ran; it resumes where its files stopped"
        session.commit()
        return [task.id for task in tasks]


def claim_queued(database: Database, limit: int, running: set[int]) -> list[tuple[int, int]]:
    """Mark up to ``limit`` queued tasks (oldest first) ``running``; return ``(id, run number)`` of each.

    The run number (``run_count``) is the run's token: a run's late writes are ignored once a newer
    run of the same task started (after a cancel and a resume, say)."""
    if limit <= 0:
        return []
    with database.session() as session:
        query = select(ModelTask).where(ModelTask.state == "queued").order_by(ModelTask.id)
        claimed: list[tuple[int, int]] = []
        for task in session.scalars(query):
            if task.id in running:
                continue
            if task.cancel_requested:
                task.state, task.reason, task.finished_at = "cancelled", "cancelled by request", utc_now()
                _model_after_stop(session, task, "cancelled by request")
                continue
            task.state = "running"
            task.started_at = utc_now()
            task.run_count += 1
            claimed.append((task.id, task.run_count))
            if len(claimed) >= limit:
                break
        session.commit()
        return claimed


def cancel_requests(database: Database, running: set[int]) -> list[int]:
    """Running tasks whose cancel was asked (by this server's API or another process's)."""
    if not running:
        return []
    with database.session() as session:
        query = select(ModelTask.id).where(ModelTask.id.in_(running), ModelTask.cancel_requested.is_(True))
        return list(session.scalars(query))


def write_progress(database: Database, progress: dict[int, tuple[int, list[dict[str, Any]], int]]) -> None:
    """Per-file progress and bytes done of running tasks (``{id: (run, files, done)}``), and the
    downloading models' bytes."""
    if not progress:
        return
    with database.session() as session:
        for task_id, (run, files, done) in progress.items():
            task = session.get(ModelTask, task_id)
            if task is None or task.state != "running" or task.run_count != run:
                continue
            task.files, task.done_bytes = files, done
            if task.kind == "pull":
                model = session.scalar(select(ModelFile).where(ModelFile.name == task.model_name))
                if model is not None and model.state == "downloading":
                    model.downloaded_bytes = done
        session.commit()


def set_reason(database: Database, task_id: int, reason: str) -> None:
    with database.session() as session:
        task = session.get(ModelTask, task_id)
        if task is not None:
            task.reason = reason
            session.commit()


def finish_task(
    database: Database,
    task_id: int,
    state: str,
    reason: str,
    files: list[dict[str, Any]] | None = None,
    done_bytes: int | None = None,
    *,
    run: int | None = None,
) -> None:
    """Record how a run ended: ``completed``, ``failed``, ``cancelled``, or ``queued`` (shutdown).
    With ``run``, only while that run is the task's newest."""
    with database.session() as session:
        task = session.get(ModelTask, task_id)
        if task is None or (run is not None and task.run_count != run):
            return
        task.state, task.reason = state, reason
        if files is not None:
            task.files = files
        if done_bytes is not None:
            task.done_bytes = done_bytes
        if state in FINAL_STATES:
            task.finished_at = utc_now()
        if state in ("failed", "cancelled"):
            _model_after_stop(session, task, reason)
        session.commit()


def _model_after_stop(session: Any, task: ModelTask, reason: str) -> None:
    """A pull that failed or was cancelled leaves its model ``incomplete``, saying why."""
    if task.kind != "pull":
        return
    model = session.scalar(select(ModelFile).where(ModelFile.name == task.model_name))
    if model is None or model.state not in ("downloading", "incomplete"):
        return
    missing = [entry["path"] for entry in task.files or [] if entry.get("state") != "verified"]
    reasons = [f"download {'cancelled' if task.state == 'cancelled' else 'failed'}: {reason}"]
    if missing:
        shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
        reasons.append(f"not downloaded or not verified: {shown}")
    reasons.append(f"resume it with `modelyard tasks resume {task.id}`")
    model.state, model.reasons = "incomplete", reasons
