"""Model tasks as the API starts them: pull from a hub, import a bundle, export a bundle.

Everything a user can get wrong is checked here, before a task is stored, so that a refusal is an
immediate error and nothing is downloaded: the reference, the name, the hub's file list (the
repository and revision exist), the include / exclude patterns and the quantisation, the target
directory, the disk space with its headroom. The task then runs in the ``DownloadManager``.

Usage::

    plan = plan_pull(session, PullRequest(source="hf://Qwen/Qwen3-8B"), options, models_root)
    task = create_pull_task(session, plan)      # the model row is "downloading" from now on
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from modelyard.downloads.options import DownloadOptions
from modelyard.downloads.progress import PENDING
from modelyard.errors import AlreadyExists, Conflict, InvalidInput
from modelyard.hub.bundle import read_bundle_manifest
from modelyard.hub.disk import check_disk_space, format_size
from modelyard.hub.download import PARTIAL_FOLDER, bytes_on_disk
from modelyard.hub.files import RemoteFile, RepoListing, select_files
from modelyard.hub.manifest import Manifest, directory_files
from modelyard.hub.reference import ModelReference, parse_model_reference
from modelyard.services.model_files import DEPLOYABLE_MODEL_STATES, get_model, stored_manifest
from modelyard.services.names import MAXIMUM_NAME_LENGTH, check_name, commit_new
from modelyard.store.tables import ModelFile, ModelTask

# PATH_MAX on Linux.
MAXIMUM_PATH_CHARACTERS = 4096
MAXIMUM_PATTERNS = 64
# An --include / --exclude pattern (fnmatch).
Pattern = Annotated[str, Field(min_length=1, max_length=256)]


class PullRequest(BaseModel):
    """What a user asks for with ``modelyard models pull``: the input of ``plan_pull`` and
    ``create_pull_task``, and (with ``dry_run``) the body of ``POST /api/v1/models/pull``."""

    model_config = ConfigDict(extra="forbid")

    # hf://ORG/NAME[@REVISION] or ms://ORG/NAME[@REVISION].
    source: str = Field(min_length=1, max_length=512)
    # Default: the repository's name.
    name: str | None = Field(default=None, max_length=MAXIMUM_NAME_LENGTH)
    include: list[Pattern] = Field(default_factory=list, max_length=MAXIMUM_PATTERNS)
    exclude: list[Pattern] = Field(default_factory=list, max_length=MAXIMUM_PATTERNS)
    quantization: str | None = Field(default=None, max_length=32)
    # Absolute, on the server's host; default: <models root>/<name>.
    target_dir: str | None = Field(default=None, max_length=MAXIMUM_PATH_CHARACTERS)


@dataclass
class PullPlan:
    reference: ModelReference
    name: str
    listing: RepoListing
    files: list[RemoteFile]
    target: Path
    needed_bytes: int
    free_bytes: int
    endpoint: str

    @property
    def total_bytes(self) -> int:
        return sum(file.size for file in self.files)

    def to_json(self) -> dict[str, Any]:
        chosen = {file.path for file in self.files}
        return {
            "source": str(self.reference),
            "name": self.name,
            "endpoint": self.endpoint,
            "commit": self.listing.commit,
            "revision": self.listing.revision,
            "target": str(self.target),
            "total_bytes": self.total_bytes,
            "needed_bytes": self.needed_bytes,
            "free_bytes": self.free_bytes,
            "files": [file.to_json() for file in self.files],
            "skipped": [file.path for file in self.listing.files if file.path not in chosen],
        }


def directory_name(name: str) -> str:
    """A model name as one folder name ("Qwen/Qwen3-8B" -> "Qwen--Qwen3-8B")."""
    return name.replace("/", "--").replace(":", "-")


def _absolute(text: str, what: str) -> Path:
    path = Path(text).expanduser()
    if not path.is_absolute():
        raise InvalidInput(
            f"{what} {text!r} is relative; the server cannot know what it is relative to",
            hint="give an absolute path (the CLI does this for you)",
        )
    return path


def _check_target(target: Path, expected: set[str]) -> None:
    """A pull goes into a missing or empty directory, or one holding only files of this pull."""
    if not target.exists():
        return
    if not target.is_dir():
        raise InvalidInput(f"{target} exists and is not a directory", hint="choose another --to DIR")
    strangers = [path for path in directory_files(target) if path not in expected]
    if strangers:
        shown = ", ".join(strangers[:3]) + (" ..." if len(strangers) > 3 else "")
        raise InvalidInput(
            f"{target} already holds files that are not part of this pull ({shown})",
            hint="choose an empty directory with --to DIR, or remove that one",
        )


def _entry(file: RemoteFile) -> dict[str, Any]:
    return {**file.to_json(), "state": PENDING, "bytes": 0, "retries": 0, "restarts": 0, "error": None}


def check_model_name_free(session: Session, name: str) -> None:
    existing = session.scalar(select(ModelFile).where(ModelFile.name == name))
    if existing is not None:
        raise AlreadyExists(
            f"a model named {name!r} already exists ({existing.state})",
            hint="pick another name with --name; an unfinished pull resumes with `modelyard tasks resume ID`",
        )
    if _active_task_for(session, name) is not None:
        raise Conflict(f"a task for a model named {name!r} is already queued or running")


def pull_name(request: PullRequest) -> str:
    reference = parse_model_reference(request.source)
    return check_name(request.name if request.name is not None else reference.default_name, "model")


def plan_pull(request: PullRequest, options: DownloadOptions, models_root: Path) -> PullPlan:
    """List the repository on its hub (network: call it off the event loop, with no session open)
    and check patterns, target and disk; store nothing."""
    reference = parse_model_reference(request.source)
    name = pull_name(request)
    target = (
        _absolute(request.target_dir, "target directory")
        if request.target_dir
        else models_root / directory_name(name)
    )
    listing = options.source(reference.hub).list_files(reference)
    files = select_files(
        listing.files, include=request.include, exclude=request.exclude, quantization=request.quantization
    )
    _check_target(target, {file.path for file in files})
    needed = sum(file.size - bytes_on_disk(target, file) for file in files)
    free = check_disk_space(target, needed, options.headroom, options.disk_space)
    return PullPlan(reference, name, listing, files, target, needed, free, options.endpoint(reference.hub))


def create_pull_task(session: Session, plan: PullPlan, request: PullRequest) -> ModelTask:
    """Store the model (``downloading``) and its pull task (``queued``), in one transaction."""
    check_model_name_free(session, plan.name)
    listing = plan.listing
    model = ModelFile(
        name=plan.name,
        source=plan.reference.hub,
        path=str(plan.target),
        state="downloading",
        reasons=[],
        repo_id=plan.reference.repo_id,
        revision=listing.commit or listing.revision,
        size_bytes=plan.total_bytes,
        downloaded_bytes=plan.total_bytes - plan.needed_bytes,
        details={},
    )
    task = ModelTask(
        kind="pull",
        model_name=plan.name,
        source=str(plan.reference),
        target_path=str(plan.target),
        options={
            "include": request.include,
            "exclude": request.exclude,
            "quantization": request.quantization,
            "endpoint": plan.endpoint,
            "commit": listing.commit,
            "revision": listing.revision,
        },
        files=[_entry(file) for file in plan.files],
        total_bytes=plan.total_bytes,
        done_bytes=0,
        reason=f"queued: {len(plan.files)} files, {format_size(plan.total_bytes)}",
    )
    session.add_all([model, task])
    commit_new(session, "model", plan.name)
    return task


def _active_task_for(session: Session, name: str) -> ModelTask | None:
    return session.scalar(
        select(ModelTask).where(ModelTask.model_name == name, ModelTask.state.in_(("queued", "running")))
    )


def create_import_task(
    session: Session,
    archive: str,
    name: str | None,
    target_dir: str | None,
    options: DownloadOptions,
    models_root: Path,
) -> ModelTask:
    """Read the bundle's manifest (a refusal is immediate), check name, target and disk; queue it."""
    archive_path = _absolute(archive, "archive")
    if not archive_path.is_file():
        raise InvalidInput(
            f"no archive at {archive_path}", hint="give the path of a bundle on the server's host"
        )
    manifest = read_bundle_manifest(archive_path)
    model_name = check_name(name if name is not None else str(manifest.facts.get("name") or ""), "model")
    check_model_name_free(session, model_name)
    target = (
        _absolute(target_dir, "target directory") if target_dir else models_root / directory_name(model_name)
    )
    if target.exists() and any(child.name != PARTIAL_FOLDER for child in target.iterdir()):
        raise InvalidInput(
            f"cannot import into {target}: it is not empty", hint="choose another directory with --to DIR"
        )
    check_disk_space(target, manifest.size_bytes, options.headroom, options.disk_space)
    task = ModelTask(
        kind="import",
        model_name=model_name,
        source=str(archive_path),
        target_path=str(target),
        options={"bundle_source": manifest.source},
        files=[_entry(RemoteFile(file.path, file.size, sha256=file.sha256)) for file in manifest.files],
        total_bytes=manifest.size_bytes,
        done_bytes=0,
        reason=f"queued: {len(manifest.files)} files, {format_size(manifest.size_bytes)}",
    )
    session.add(task)
    session.commit()
    return task


def create_export_task(session: Session, name: str, archive: str, options: DownloadOptions) -> ModelTask:
    """Check the model (valid, files in place), the archive path and the disk; queue the export."""
    model = get_model(session, name)
    if model.state not in DEPLOYABLE_MODEL_STATES:
        raise Conflict(
            f"model {name!r} is {model.state}: only a complete, servable model can be exported "
            "(an unverified one stays unverified where its bundle is imported)",
            hint="see `modelyard models show " + name + "`",
        )
    if not model.on_server:
        raise Conflict(
            f"model {name!r} has its files on the workers only; an export reads them on the server's host",
            hint="copy the directory to the server's host and register it there (modelyard models add PATH)",
        )
    archive_path = _absolute(archive, "archive")
    if archive_path.exists():
        raise InvalidInput(f"{archive_path} already exists", hint="remove it or choose another file name")
    if not archive_path.parent.is_dir():
        raise InvalidInput(f"the folder {archive_path.parent} does not exist", hint="create it first")
    directory = Path(model.path)
    manifest: Manifest | None = stored_manifest(model)
    if manifest is not None:
        entries = [RemoteFile(file.path, file.size, sha256=file.sha256) for file in manifest.files]
    else:
        entries = [RemoteFile(path, (directory / path).stat().st_size) for path in directory_files(directory)]
    total = sum(file.size for file in entries)
    check_disk_space(archive_path.parent, total, options.headroom, options.disk_space)
    task = ModelTask(
        kind="export",
        model_name=name,
        source=str(directory),
        target_path=str(archive_path),
        options={"has_manifest": manifest is not None},
        files=[_entry(file) for file in entries],
        total_bytes=total,
        done_bytes=0,
        reason=f"queued: {len(entries)} files, {format_size(total)}",
    )
    session.add(task)
    session.commit()
    return task
