"""What a task does, in its worker thread: pull from a hub, import a bundle, export a bundle, push
to a worker (``push_runner.py``).

Each runner reads its task, checks the disk before the first byte, does the work through the hub
library (``modelyard.hub``) reporting to the task's ``TaskProgress``, and records the outcome:
the model registered (or updated) with its manifest, or the task failed with the reason, naming
the file. ``run_task`` turns every way a run can end into the task's state, so that one task can
never take the manager down.

Usage (by ``DownloadManager``)::

    run_task(database, options, task_id, progress, stop)
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from sqlalchemy import select

from modelyard.downloads.options import DownloadOptions
from modelyard.downloads.progress import VERIFIED, TaskProgress
from modelyard.downloads.push_runner import ModelPusher, run_push
from modelyard.downloads.records import TaskData, finish_task, load_task, set_reason
from modelyard.errors import ModelyardError
from modelyard.hub.bundle import export_bundle, import_bundle, read_bundle_manifest
from modelyard.hub.disk import check_disk_space, format_size
from modelyard.hub.download import bytes_on_disk, download_files
from modelyard.hub.files import RemoteFile, RepoListing
from modelyard.hub.manifest import Manifest, ManifestFile, build_manifest
from modelyard.hub.reference import ModelReference, parse_model_reference
from modelyard.hub.transfer import StopSignal, TransferFailed, TransferStopped
from modelyard.hub.verification import UNVERIFIED
from modelyard.modeldir import inspect_model_directory
from modelyard.store.database import Database
from modelyard.store.tables import ModelFile

logger = logging.getLogger(__name__)

SHUTDOWN = "the server is shutting down"
CANCELLED = "cancelled by request"


def model_facts(record: ModelFile) -> dict[str, Any]:
    """What a manifest says of the model besides its files."""
    return {
        "name": record.name,
        "architecture": record.architecture,
        "model_type": record.model_type,
        "dtype": record.dtype,
        "parameter_count": record.parameter_count,
        "size_bytes": record.size_bytes,
        "repo_id": record.repo_id,
        "revision": record.revision,
        "source": record.source,
    }


def _apply_inspection(record: ModelFile, directory: Path, manifest: Manifest) -> None:
    """Fill a model row from its directory (facts read without loading weights) and its manifest."""
    report = inspect_model_directory(directory)
    record.state = "valid" if report.valid else "invalid"
    record.reasons = report.reasons
    verification = manifest.verification
    if report.valid and verification is not None and not verification.verified:
        record.state, record.reasons = UNVERIFIED, [verification.reason()]
    record.architecture = report.architecture
    record.model_type = report.model_type
    record.dtype = report.dtype
    record.parameter_count = report.parameter_count
    record.size_bytes = manifest.size_bytes
    record.details = {**report.to_json(), "manifest": manifest.to_json()}
    if verification is not None:
        record.details["verification"] = verification.to_json()


def _manifest_of(files: list[RemoteFile], hashes: dict[str, str], source: str) -> Manifest:
    """The manifest of a pull: every file's size, the SHA-256 of what arrived, and how it was checked."""
    return Manifest(
        files=[ManifestFile(file.path, file.size, hashes[file.path], file.check) for file in files],
        source=source,
    )


def _pull(
    database: Database, options: DownloadOptions, task: TaskData, progress: TaskProgress, stop: StopSignal
) -> str:
    reference = parse_model_reference(task.source)
    files = [RemoteFile.from_json(entry) for entry in task.files]
    listing = RepoListing(reference=reference, commit=task.options.get("commit"), files=files)
    target = Path(task.target_path)
    needed = sum(file.size - bytes_on_disk(target, file) for file in files)
    check_disk_space(target, needed, options.headroom, options.disk_space)
    verified = {
        str(entry["path"]): str(entry["verified_sha256"])
        for entry in task.files
        if entry.get("state") == VERIFIED and entry.get("verified_sha256")
    }
    hashes = download_files(
        options.source(reference.hub),
        listing,
        files,
        target,
        options.transfer,
        progress,
        stop,
        parallel_files=options.parallel_files,
        verified=verified,
    )
    pinned = ModelReference(reference.hub, reference.repo_id, listing.revision)
    manifest = _manifest_of(files, hashes, str(pinned))
    with database.session() as session:
        record = session.scalar(select(ModelFile).where(ModelFile.name == task.model_name))
        if record is None:
            return f"downloaded {len(files)} files into {target}; the model was removed meanwhile"
        _apply_inspection(record, target, manifest)
        manifest.facts = model_facts(record)
        record.details = {**record.details, "manifest": manifest.to_json()}
        record.downloaded_bytes = manifest.size_bytes
        state = record.state
        session.commit()
    verification = manifest.verification
    assert verification is not None  # a pull records every file's check
    summary = f"{len(files)} files, {format_size(manifest.size_bytes)}: {verification.sentence()}"
    if state == UNVERIFIED:
        return f"{summary}; the model is unverified (see models show)"
    return summary if state == "valid" else f"{summary}; but the directory is not servable (see models show)"


def _import(
    database: Database, options: DownloadOptions, task: TaskData, progress: TaskProgress, stop: StopSignal
) -> str:
    archive, destination = Path(task.source), Path(task.target_path)
    planned = read_bundle_manifest(archive)
    check_disk_space(destination, planned.size_bytes, options.headroom, options.disk_space)
    manifest = import_bundle(archive, destination, on_bytes=progress.bytes_received, stop=stop)
    for file in manifest.files:
        progress.file_verified(file.path, file.sha256)
    with database.session() as session:
        if session.scalar(select(ModelFile.id).where(ModelFile.name == task.model_name)) is not None:
            raise ModelyardError(
                f"a model named {task.model_name!r} was registered meanwhile; "
                f"the verified files are in {destination}",
                hint=f"register them under another name: modelyard models add {destination} --name OTHER",
            )
        record = ModelFile(
            name=task.model_name,
            source="bundle",
            path=str(destination.resolve()),
            repo_id=manifest.facts.get("repo_id"),
            revision=manifest.facts.get("revision"),
        )
        _apply_inspection(record, destination, manifest)
        session.add(record)
        session.commit()
    size = format_size(manifest.size_bytes)
    summary = f"{len(manifest.files)} files, {size}, every SHA-256 checked against the bundle"
    verification = manifest.verification
    if verification is not None and not verification.verified:
        unverified = len(verification.unverified_files)
        summary += f"; {unverified} of them had no hash from the hub when pulled: the model is unverified"
    return summary


def _export(
    database: Database, options: DownloadOptions, task: TaskData, progress: TaskProgress, stop: StopSignal
) -> str:
    with database.session() as session:
        record = session.scalar(select(ModelFile).where(ModelFile.name == task.model_name))
        if record is None:
            raise ModelyardError(f"the model {task.model_name!r} was removed before its export ran")
        directory, facts, stored = (
            Path(record.path),
            model_facts(record),
            (record.details or {}).get("manifest"),
        )
    if stored:
        manifest = Manifest.from_json(stored, where=f"the stored manifest of {task.model_name}")
    else:
        progress.phase = "hashing"
        set_reason(database, task.id, "hashing every file for the bundle's manifest")
        manifest = build_manifest(directory, on_bytes=progress.bytes_received)
        for entry in task.files:
            progress.reset_bytes(str(entry["path"]))
    manifest.facts = facts
    progress.phase = "writing"
    archive = Path(task.target_path)
    check_disk_space(archive.parent, manifest.size_bytes, options.headroom, options.disk_space)
    set_reason(database, task.id, f"writing {archive}")
    export_bundle(directory, manifest, archive, on_bytes=progress.bytes_received, stop=stop)
    for file in manifest.files:
        progress.file_verified(file.path, file.sha256)
    return f"wrote {archive}: {len(manifest.files)} files, {format_size(manifest.size_bytes)}"


_RUNNERS = {"pull": _pull, "import": _import, "export": _export}


def run_task(
    database: Database,
    options: DownloadOptions,
    task_id: int,
    run: int,
    progress: TaskProgress,
    stop: StopSignal,
    pusher: ModelPusher | None = None,
) -> None:
    """Run one task to its end and record it (as run number ``run``); never raises for what it met.
    ``pusher``: how a push reaches the cluster's workers (None without a cluster)."""
    task = load_task(database, task_id)
    if task is None:
        return

    def finish(state: str, reason: str) -> None:
        files, done = progress.snapshot()
        finish_task(database, task_id, state, reason, files, done, run=run)

    try:
        if task.kind == "push":
            summary = run_push(database, task, progress, stop, pusher)
        else:
            summary = _RUNNERS[task.kind](database, options, task, progress, stop)
    except TransferStopped as stopped:
        if stopped.reason == SHUTDOWN:
            finish("queued", "interrupted by a server shutdown; it resumes at the next start")
        else:
            finish("cancelled", CANCELLED)
        return
    except TransferFailed as failed:
        progress.file_failed(failed.path, failed.reason)
        finish("failed", str(failed))
        return
    except ModelyardError as error:
        finish("failed", str(error))
        return
    except OSError as error:
        finish("failed", f"{error.strerror or error}: {error.filename or ''}".strip(": "))
        return
    except Exception as error:  # a bug must fail its task, not the manager
        logger.exception("task %s (%s %s) failed unexpectedly", task_id, task.kind, task.model_name)
        finish("failed", f"unexpected {type(error).__name__}: {error}")
        return
    finish("completed", summary)
