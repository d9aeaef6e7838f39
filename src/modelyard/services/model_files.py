"""Model files: local directories registered by path, validated before anything is stored.

Usage::

    record = register_model(session, "qwen3-8b", Path("/models/Qwen3-8B"))
    record.state, record.parameter_count, record.size_bytes
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from modelyard.errors import AlreadyExists, Conflict, InvalidInput, InvalidModelDirectory, NotFound
from modelyard.hub.manifest import FileProblem, Manifest, check_files
from modelyard.hub.verification import UNVERIFIED
from modelyard.modeldir import ModelDirectoryReport, inspect_model_directory
from modelyard.services.names import check_name, commit_new
from modelyard.store.tables import Deployment, ModelFile, ModelTask, WorkerModel

# Models a deployment may use: ``unverified`` ones (a file the hub gave no hash for) with a warning.
DEPLOYABLE_MODEL_STATES = ("valid", UNVERIFIED)


def inspect_directory(path: Path) -> ModelDirectoryReport:
    """Inspect ``path`` without loading weights; raise ``InvalidModelDirectory`` when it cannot be served."""
    report = inspect_model_directory(path)
    report.raise_if_invalid()
    return report


def model_to_json(record: ModelFile, deployments: list[str] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": record.name,
        "source": record.source,
        "path": record.path,
        "state": record.state,
        "reasons": record.reasons,
        "architecture": record.architecture,
        "model_type": record.model_type,
        "dtype": record.dtype,
        "parameter_count": record.parameter_count,
        "size_bytes": record.size_bytes,
        "repo_id": record.repo_id,
        "revision": record.revision,
        "downloaded_bytes": record.downloaded_bytes,
        # How the files were checked against their hub (pulled and imported models), else None.
        "verification": (record.details or {}).get("verification"),
        "details": record.details,
        # False: the files are only on the cluster's workers (``workers`` says which).
        "on_server": record.on_server is not False,
        "created_at": record.created_at.isoformat(),
    }
    if deployments is not None:
        data["deployments"] = deployments
    return data


def stored_manifest(record: ModelFile) -> Manifest | None:
    """The manifest a pull or an import stored with the model (None for a local directory)."""
    data = (record.details or {}).get("manifest")
    if not data:
        return None
    try:
        return Manifest.from_json(data, where=f"the stored manifest of {record.name}")
    except InvalidInput:
        return None


def file_problems(record: ModelFile) -> list[FileProblem]:
    """Files of a pulled or imported model that are missing or have the wrong size (a stat each)."""
    manifest = stored_manifest(record)
    if manifest is None:
        return []
    return check_files(Path(record.path), manifest.files)


def latest_task(session: Session, record: ModelFile) -> ModelTask | None:
    """The newest pull or import task that filled this model."""
    return session.scalar(
        select(ModelTask)
        .where(ModelTask.model_name == record.name, ModelTask.kind.in_(("pull", "import")))
        .order_by(ModelTask.id.desc())
        .limit(1)
    )


def files_report(session: Session, record: ModelFile) -> dict[str, Any]:
    """For ``models show``: the files the model must have and which of them are missing or bad."""
    manifest = stored_manifest(record)
    task = latest_task(session, record)
    report: dict[str, Any] = {
        "verified": manifest is not None,
        "count": len(manifest.files) if manifest else None,
        "problems": [problem.to_json() for problem in file_problems(record)],
        "task": None,
    }
    if task is not None:
        report["task"] = {"id": task.id, "kind": task.kind, "state": task.state, "reason": task.reason}
        if record.state in ("downloading", "incomplete"):
            report["problems"] = [
                {
                    "path": entry["path"],
                    "problem": "failed" if entry.get("state") == "failed" else "not downloaded",
                    "detail": entry.get("error")
                    or f"{entry.get('bytes', 0)} of {entry['size']} bytes, {entry.get('state', 'pending')}",
                }
                for entry in task.files or []
                if entry.get("state") != "verified"
            ]
    return report


def register_model(session: Session, name: str | None, path: Path) -> ModelFile:
    """Validate ``path`` and store it as a model file; an invalid directory stores nothing."""
    try:
        path = path.expanduser()
    except RuntimeError as error:  # ~user of a user this host does not have
        raise InvalidModelDirectory(
            f"model path {str(path)!r} starts with a home directory this host does not know ({error})",
            hint="give an absolute path",
        ) from error
    if not path.is_absolute():
        raise InvalidModelDirectory(
            f"model path {str(path)!r} is relative; the server cannot know what it is relative to",
            hint="give an absolute path (the CLI does this for you)",
        )
    model_name = check_name(name if name is not None else path.name, "model")
    if session.scalar(select(ModelFile).where(ModelFile.name == model_name)) is not None:
        raise AlreadyExists(
            f"a model named {model_name!r} already exists",
            hint="pick another name with --name, or remove the old one first (modelyard models rm)",
        )
    report = inspect_directory(path)
    record = ModelFile(
        name=model_name,
        source="local",
        path=str(path.resolve()),
        state="valid",
        reasons=[],
        architecture=report.architecture,
        model_type=report.model_type,
        dtype=report.dtype,
        parameter_count=report.parameter_count,
        size_bytes=report.size_bytes,
        details=report.to_json(),
    )
    session.add(record)
    commit_new(session, "model", model_name)
    return record


def list_models(session: Session) -> list[ModelFile]:
    return list(session.scalars(select(ModelFile).order_by(ModelFile.name)))


def get_model(session: Session, name: str) -> ModelFile:
    record = session.scalar(select(ModelFile).where(ModelFile.name == name))
    if record is None:
        known = [model.name for model in list_models(session)]
        raise NotFound(
            f"no model named {name!r}",
            hint=f"models: {', '.join(known)}" if known else "add one with `modelyard models add PATH`",
        )
    return record


def deployments_using(session: Session, record: ModelFile) -> list[str]:
    return list(
        session.scalars(
            select(Deployment.name).where(Deployment.model_file_id == record.id).order_by(Deployment.name)
        )
    )


def deployment_counts(session: Session) -> dict[int, int]:
    rows = session.execute(select(Deployment.model_file_id, func.count()).group_by(Deployment.model_file_id))
    return {model_file_id: count for model_file_id, count in rows}


def remove_model(session: Session, name: str) -> None:
    """Forget a model (the files on disk stay). Refused while a deployment uses it."""
    record = get_model(session, name)
    using = deployments_using(session, record)
    task = latest_task(session, record)
    if task is not None and task.state in ("queued", "running"):
        raise Conflict(
            f"model {name!r} is being {'downloaded' if task.kind == 'pull' else 'imported'} (task {task.id})",
            hint=f"cancel it first: modelyard tasks cancel {task.id}",
        )
    pushing = session.scalar(
        select(ModelTask.id).where(
            ModelTask.kind == "push",
            ModelTask.model_name == record.name,
            ModelTask.state.in_(("queued", "running")),
        )
    )
    if pushing is not None:
        raise Conflict(
            f"model {name!r} is being pushed to a worker (task {pushing})",
            hint=f"wait for it (modelyard tasks wait {pushing}), or cancel it (modelyard tasks cancel "
            f"{pushing})",
        )
    if using:
        raise Conflict(
            f"model {name!r} is used by deployment{'s' if len(using) > 1 else ''} {', '.join(using)}",
            hint="remove those deployments first (modelyard rm NAME)",
        )
    session.execute(delete(WorkerModel).where(WorkerModel.model_file_id == record.id))
    session.delete(record)
    session.commit()
