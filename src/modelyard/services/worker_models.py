"""Models on the cluster's workers: registered where only workers have them, seen per worker,
and pushed to the workers that lack them.

``register_on_worker`` stores a model whose files are only on workers, from the inspection run
there (``cluster/model_copies.inspect_on_worker``); ``worker_copies`` is what ``models show``
says per worker; ``record_survey`` keeps the rows current from the survey
(``server/model_survey.py``); ``create_push_tasks`` checks a push and queues one task per worker.

Usage::

    record = register_on_worker(session, "qwen", "/models/qwen", "gpu-2", inspection)
    tasks = create_push_tasks(session, "qwen", ["gpu-2"], ready=["gpu-1", "gpu-2"], options=options)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelyard.cluster.model_copies import COPYING, PRESENT, VERIFIED
from modelyard.downloads.options import DownloadOptions
from modelyard.downloads.progress import PENDING
from modelyard.errors import Conflict, InvalidInput, InvalidModelDirectory, NotFound
from modelyard.hub.bundle import read_bundle_manifest
from modelyard.hub.disk import format_size
from modelyard.hub.manifest import directory_files
from modelyard.hub.verification import UNVERIFIED
from modelyard.services.model_files import DEPLOYABLE_MODEL_STATES, get_model, stored_manifest
from modelyard.services.model_tasks import check_model_name_free, directory_name
from modelyard.services.names import check_name, commit_new
from modelyard.store.tables import ModelFile, ModelTask, WorkerModel, utc_now


def push_command(name: str, workers: list[str]) -> str:
    """The command that copies ``name`` to ``workers``."""
    return f"modelyard models push {name} " + " ".join(f"--worker {worker}" for worker in workers)


def register_on_worker(
    session: Session, name: str | None, path: str, worker: str, inspection: dict[str, Any]
) -> ModelFile:
    """Store the model found at ``path`` on ``worker`` (``inspection``: its answer); nothing is
    stored when it cannot be served there."""
    if inspection.get("error"):
        raise InvalidModelDirectory(
            f"on worker {worker}: {inspection['error']}",
            hint="check the path on that worker (the same path every worker that serves it must have)",
        )
    report: dict[str, Any] = inspection["report"]
    model_name = check_name(name if name is not None else Path(path).name, "model")
    check_model_name_free(session, model_name)
    record = ModelFile(
        name=model_name,
        source="worker",
        path=path,
        state="valid",
        reasons=[],
        architecture=report.get("architecture"),
        model_type=report.get("model_type"),
        dtype=report.get("dtype"),
        parameter_count=report.get("parameter_count"),
        size_bytes=sum(int(file["size"]) for file in inspection["files"]),
        details={**report, "files": inspection["files"], "registered_on": worker},
        on_server=False,
    )
    session.add(record)
    session.flush()
    session.add(
        WorkerModel(
            model_file_id=record.id,
            worker=worker,
            state=PRESENT,
            reason=f"found by `models add --worker {worker}`",
            details={},
        )
    )
    commit_new(session, "model", model_name)
    return record


def _copy_json(row: WorkerModel, ready: set[str] | None) -> dict[str, Any]:
    lost = ready is not None and row.worker not in ready
    return {
        "worker": row.worker,
        "state": row.state,
        "worker_state": "lost" if lost else "ready",
        "reason": row.reason,
        "problems": (row.details or {}).get("problems", []),
        "verified_at": row.verified_at.isoformat() if row.verified_at else None,
        "checked_at": row.checked_at.isoformat(),
    }


def worker_copies(session: Session, record: ModelFile, ready: set[str] | None) -> list[dict[str, Any]]:
    """The model on each worker the server has looked at (``ready``: the ready workers' names,
    None on a single host)."""
    rows = session.scalars(
        select(WorkerModel).where(WorkerModel.model_file_id == record.id).order_by(WorkerModel.worker)
    )
    return [_copy_json(row, ready) for row in rows]


def all_worker_copies(session: Session, ready: set[str] | None) -> dict[int, list[dict[str, Any]]]:
    """For ``models``: every model's copies, by model id."""
    copies: dict[int, list[dict[str, Any]]] = {}
    for row in session.scalars(select(WorkerModel).order_by(WorkerModel.worker)):
        copies.setdefault(row.model_file_id, []).append(_copy_json(row, ready))
    return copies


def servable_copies(session: Session, model_file_id: int) -> dict[str, str] | None:
    """Each worker's state of the model, for placement; None when no worker was looked at."""
    rows = list(session.scalars(select(WorkerModel).where(WorkerModel.model_file_id == model_file_id)))
    return {row.worker: row.state for row in rows} if rows else None


def reference_files(record: ModelFile) -> list[dict[str, Any]] | None:
    """The files (path, size) a copy of ``record`` must have: its manifest's, else the listing
    its worker registration recorded, else the server's directory as it is now."""
    manifest = stored_manifest(record)
    if manifest is not None:
        return [{"path": file.path, "size": file.size} for file in manifest.files]
    recorded = (record.details or {}).get("files")
    if not record.on_server:
        return list(recorded) if isinstance(recorded, list) else None
    directory = Path(record.path)
    try:
        return [
            {"path": path, "size": (directory / path).stat().st_size} for path in directory_files(directory)
        ]
    except OSError:
        return None


def survey_input(session: Session) -> list[dict[str, Any]]:
    """What the survey asks each worker about: every servable model with the files it must have."""
    models = session.scalars(select(ModelFile).where(ModelFile.state.in_(DEPLOYABLE_MODEL_STATES)))
    return [
        {"id": model.id, "name": model.name, "path": model.path, "files": reference_files(model)}
        for model in models
    ]


def pushing_to(session: Session, worker: str) -> set[str]:
    """The models a push task to ``worker`` is queued or running for."""
    tasks = session.scalars(
        select(ModelTask).where(ModelTask.kind == "push", ModelTask.state.in_(("queued", "running")))
    )
    return {task.model_name for task in tasks if (task.options or {}).get("worker") == worker}


def record_survey(
    session: Session, worker: str, models: list[dict[str, Any]], answers: dict[str, dict[str, Any]]
) -> None:
    """Write one worker's answers; a copy stays ``verified`` while its files are the ones whose
    hashes were checked (same fingerprint), and ``copying`` while a push to it is queued or runs
    (a push the server was killed in, and that no task will finish, is surveyed again)."""
    pushing = pushing_to(session, worker)
    rows = {
        row.model_file_id: row
        for row in session.scalars(select(WorkerModel).where(WorkerModel.worker == worker))
    }
    now = utc_now()
    for model in models:
        answer = answers.get(str(model["name"]))
        if answer is None:
            continue
        row = rows.get(int(model["id"]))
        if row is None:
            row = WorkerModel(
                model_file_id=int(model["id"]), worker=worker, state=answer["state"], details={}
            )
            session.add(row)
        row.checked_at = now
        if row.state == COPYING and str(model["name"]) in pushing:
            continue
        verified_print = (row.details or {}).get("verified_fingerprint")
        if (
            answer["state"] == PRESENT
            and verified_print is not None
            and verified_print == answer.get("fingerprint")
        ):
            row.state, row.reason = VERIFIED, "every SHA-256 checked by a push; unchanged since"
            continue
        row.state, row.reason = str(answer["state"]), str(answer.get("reason") or "")
        row.details = {"problems": list(answer.get("problems") or [])}
        if row.state != VERIFIED:
            row.verified_at = None
    session.commit()


def _entries(record: ModelFile) -> list[dict[str, Any]]:
    manifest = stored_manifest(record)
    files: list[tuple[str, int, str | None]]
    if manifest is not None:
        files = [(file.path, file.size, file.sha256) for file in manifest.files]
    else:
        directory = Path(record.path)
        files = [(path, (directory / path).stat().st_size, None) for path in directory_files(directory)]
    return [
        {
            "path": path,
            "size": size,
            "sha256": sha256,
            "state": PENDING,
            "bytes": 0,
            "retries": 0,
            "restarts": 0,
            "error": None,
        }
        for path, size, sha256 in files
    ]


def _check_workers(workers: list[str], ready: list[str]) -> None:
    if not workers:
        raise InvalidInput("name the workers to push to (--worker W, repeatable) or --all")
    unknown = [worker for worker in workers if worker not in ready]
    if unknown:
        raise NotFound(
            f"no ready worker named {', '.join(unknown)}",
            hint=f"ready workers: {', '.join(ready) or 'none'} (see `modelyard workers`)",
        )


def create_bundle_push_tasks(
    session: Session,
    archive: str,
    *,
    name: str | None,
    target_dir: str | None,
    workers: list[str],
    ready: list[str],
    models_root: Path,
) -> list[ModelTask]:
    """Register the bundle's model as one whose files are on the workers (at ``target_dir``,
    default ``<models root>/<name>``) and queue a push of the bundle's files to each worker."""
    archive_path = Path(archive)
    if not archive_path.is_absolute() or not archive_path.is_file():
        raise InvalidInput(
            f"no archive at {archive}", hint="give the absolute path of a bundle on the server's host"
        )
    manifest = read_bundle_manifest(archive_path)
    model_name = check_name(name if name is not None else str(manifest.facts.get("name") or ""), "model")
    check_model_name_free(session, model_name)
    _check_workers(workers, ready)
    target = Path(target_dir) if target_dir else models_root / directory_name(model_name)
    if not target.is_absolute():
        raise InvalidInput(f"target directory {target_dir!r} is relative", hint="give the absolute path")
    facts = manifest.facts
    verification = manifest.verification
    unverified = verification is not None and not verification.verified
    record = ModelFile(
        name=model_name,
        source="bundle",
        path=str(target),
        state=UNVERIFIED if unverified else "valid",
        reasons=[verification.reason()] if verification is not None and unverified else [],
        architecture=facts.get("architecture"),
        model_type=facts.get("model_type"),
        dtype=facts.get("dtype"),
        parameter_count=facts.get("parameter_count"),
        size_bytes=manifest.size_bytes,
        repo_id=facts.get("repo_id"),
        revision=facts.get("revision"),
        details={"manifest": manifest.to_json(), "bundle": str(archive_path), "registered_on": "a bundle"},
        on_server=False,
    )
    if verification is not None:
        record.details["verification"] = verification.to_json()
    session.add(record)
    entries = [
        {
            "path": file.path,
            "size": file.size,
            "sha256": file.sha256,
            "state": PENDING,
            "bytes": 0,
            "retries": 0,
            "restarts": 0,
            "error": None,
        }
        for file in manifest.files
    ]
    tasks = []
    for worker in dict.fromkeys(workers):
        task = ModelTask(
            kind="push",
            model_name=model_name,
            source=str(archive_path),
            target_path=str(target),
            options={"worker": worker, "bundle": True},
            files=[dict(entry) for entry in entries],
            total_bytes=manifest.size_bytes,
            done_bytes=0,
            reason=f"queued: {len(entries)} files, {format_size(manifest.size_bytes)} from "
            f"{archive_path.name} to worker {worker}",
        )
        session.add(task)
        tasks.append(task)
    commit_new(session, "model", model_name)
    return tasks


def create_push_tasks(
    session: Session,
    name: str,
    workers: list[str],
    *,
    ready: list[str],
    every_worker: bool = False,
    options: DownloadOptions,
) -> list[ModelTask]:
    """Check the model and the workers, then queue one push task per worker (``every_worker``:
    every ready worker that lacks a verified copy)."""
    del options  # the transfer's limits are the download manager's
    record = get_model(session, name)
    if record.state not in DEPLOYABLE_MODEL_STATES:
        raise Conflict(
            f"model {name!r} is {record.state}: only a complete, servable model can be pushed",
            hint=f"see `modelyard models show {name}`",
        )
    if not record.on_server:
        raise Conflict(
            f"model {name!r} has no copy on the server's host (it was registered on worker "
            f"{(record.details or {}).get('registered_on', '?')}), and a push copies from there",
            hint="copy it to the server's host and register it there (modelyard models add PATH), "
            "or export a bundle of it and push the bundle (modelyard models push --bundle FILE)",
        )
    if not Path(record.path).is_dir():
        raise InvalidInput(f"the model directory {record.path} is gone from the server's host")
    if every_worker:
        copies = {
            row.worker: row.state
            for row in session.scalars(select(WorkerModel).where(WorkerModel.model_file_id == record.id))
        }
        workers = [worker for worker in ready if copies.get(worker) != VERIFIED]
        if not workers:
            raise Conflict(f"every ready worker has a verified copy of {name!r}", hint="nothing to push")
    _check_workers(workers, ready)
    busy = session.scalars(
        select(ModelTask).where(
            ModelTask.kind == "push",
            ModelTask.model_name == name,
            ModelTask.state.in_(("queued", "running")),
        )
    )
    running = {str((task.options or {}).get("worker")): task.id for task in busy}
    clash = [worker for worker in workers if worker in running]
    if clash:
        raise Conflict(
            f"a push of {name!r} to {clash[0]} is already queued or running (task {running[clash[0]]})",
            hint=f"follow it with: modelyard tasks wait {running[clash[0]]}",
        )
    entries = _entries(record)
    total = sum(int(entry["size"]) for entry in entries)
    tasks = []
    for worker in dict.fromkeys(workers):
        task = ModelTask(
            kind="push",
            model_name=name,
            source=record.path,
            target_path=record.path,
            options={"worker": worker, "has_manifest": stored_manifest(record) is not None},
            files=[dict(entry) for entry in entries],
            total_bytes=total,
            done_bytes=0,
            reason=f"queued: {len(entries)} files, {format_size(total)} to worker {worker}",
        )
        session.add(task)
        tasks.append(task)
    session.commit()
    return tasks
