"""A push task, in its worker thread: a model's files from the server's host to one worker.

The files are those of the model's manifest (or of a bundle, read in place from its archive:
``models push --bundle``); a model with none (a local directory) is hashed
first and its manifest stored, so that the worker's copy is checked against the same SHA-256
values as every later push, survey and export. The worker's copy is ``copying`` while the task
runs, ``verified`` when every file arrived with its hash; a failed or stopped push leaves it to
the next survey (which names what is missing). The transport is ``cluster/model_push.py``.

Usage (by ``runners.run_task``)::

    summary = run_push(database, task, progress, stop, pusher)
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelyard.cluster.model_copies import COPYING, VERIFIED
from modelyard.cluster.model_push import PushResult, SourceOpener, bundle_source, directory_source
from modelyard.downloads.progress import TaskProgress
from modelyard.downloads.records import TaskData, set_reason
from modelyard.errors import InvalidInput, ModelyardError
from modelyard.hub.bundle import read_bundle_manifest
from modelyard.hub.manifest import Manifest, ManifestFile, build_manifest
from modelyard.hub.transfer import StopSignal, TransferObserver, TransferStopped
from modelyard.store.database import Database
from modelyard.store.tables import ModelFile, WorkerModel, utc_now


class ModelPusher(Protocol):
    """``cluster.model_push.RayModelPusher``."""

    def push(
        self,
        worker: str,
        source: SourceOpener,
        files: list[ManifestFile],
        target_dir: str,
        observer: TransferObserver,
        stop: StopSignal,
    ) -> PushResult: ...


def mark_copy(
    session: Session,
    model_file_id: int,
    worker: str,
    state: str,
    reason: str,
    *,
    verified_fingerprint: str | None = None,
) -> None:
    """What a push did to a worker's copy."""
    row = session.scalar(
        select(WorkerModel).where(WorkerModel.model_file_id == model_file_id, WorkerModel.worker == worker)
    )
    if row is None:
        row = WorkerModel(model_file_id=model_file_id, worker=worker, state=state, details={})
        session.add(row)
    row.state, row.reason, row.checked_at = state, reason, utc_now()
    if state == VERIFIED:
        row.verified_at = utc_now()
        row.details = {"verified_fingerprint": verified_fingerprint, "problems": []}
    session.commit()


def stored_manifest(record: ModelFile) -> Manifest | None:
    data = (record.details or {}).get("manifest")
    if not data:
        return None
    try:
        return Manifest.from_json(data, where=f"the stored manifest of {record.name}")
    except InvalidInput:
        return None


def _manifest(database: Database, task: TaskData, progress: TaskProgress) -> tuple[int, Manifest]:
    with database.session() as session:
        record = session.scalar(select(ModelFile).where(ModelFile.name == task.model_name))
        if record is None:
            raise ModelyardError(f"the model {task.model_name!r} was removed before its push ran")
        model_id, manifest = record.id, stored_manifest(record)
    if task.options.get("bundle"):
        return model_id, read_bundle_manifest(Path(task.source))
    if manifest is not None:
        return model_id, manifest
    progress.phase = "hashing"
    set_reason(database, task.id, "hashing every file for the model's manifest (once)")
    manifest = build_manifest(Path(task.source), on_bytes=progress.bytes_received)
    for file in manifest.files:
        progress.reset_bytes(file.path)
    with database.session() as session:
        record = session.get(ModelFile, model_id)
        if record is not None and not (record.details or {}).get("manifest"):
            record.details = {**(record.details or {}), "manifest": manifest.to_json()}
            session.commit()
    return model_id, manifest


def run_push(
    database: Database, task: TaskData, progress: TaskProgress, stop: StopSignal, pusher: ModelPusher | None
) -> str:
    worker = str(task.options.get("worker"))
    if pusher is None:
        raise ModelyardError(
            "this server runs no cluster, so it has no workers to push to",
            hint="pushes run on `modelyard serve --cluster`",
        )
    model_id, manifest = _manifest(database, task, progress)
    listed = {str(entry["path"]) for entry in task.files}
    if listed != {file.path for file in manifest.files}:
        raise ModelyardError(
            f"the files of {task.model_name!r} changed since the push was queued",
            hint=f"push again: modelyard models push {task.model_name} --worker {worker}",
        )
    progress.phase = "copying"
    set_reason(database, task.id, f"copying to worker {worker}")
    with database.session() as session:
        mark_copy(session, model_id, worker, COPYING, f"push task {task.id} is copying it")
    source = (
        bundle_source(Path(task.source))
        if task.options.get("bundle")
        else directory_source(Path(task.source))
    )
    try:
        result = pusher.push(worker, source, manifest.files, task.target_path, progress, stop)
    except BaseException as error:  # whatever ends the push, the copy is no longer "copying"
        how = "stopped" if isinstance(error, TransferStopped) else f"failed: {error}"
        with database.session() as session:
            mark_copy(
                session,
                model_id,
                worker,
                "incomplete",
                f"push task {task.id} {how}; resume it with `modelyard tasks resume {task.id}`",
            )
        raise
    summary = result.sentence(manifest.size_bytes)
    with database.session() as session:
        mark_copy(
            session,
            model_id,
            worker,
            VERIFIED,
            f"every SHA-256 checked by push task {task.id}",
            verified_fingerprint=result.fingerprint,
        )
    return f"to worker {worker}: {summary}"
