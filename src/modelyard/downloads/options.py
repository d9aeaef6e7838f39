"""How the server downloads model files, each setting defined once with its environment variable.

``DownloadOptions.from_environment()`` reads the environment once, when the server starts; a bad
value is an error naming the variable and what it takes. ``SETTINGS`` is the table the docs list
(``docs/models.md``; a test keeps them in step).

Usage::

    options = DownloadOptions.from_environment()
    options.source("huggingface").list_files(reference)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from modelyard.errors import InvalidInput
from modelyard.hub.disk import DiskHeadroom, DiskSpaceSource, free_bytes
from modelyard.hub.reference import HF_DEFAULT_ENDPOINT, MODELSCOPE_DEFAULT_ENDPOINT, HubName
from modelyard.hub.source import HubSource
from modelyard.hub.transfer import TransferOptions


@dataclass(frozen=True)
class Setting:
    """One download setting: the field it fills, its variable, its type and what it does."""

    field: str
    variable: str
    kind: type
    help: str


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "hf_endpoint",
        "HF_ENDPOINT",
        str,
        "Hugging Face Hub or a mirror of it (default https://huggingface.co).",
    ),
    Setting(
        "modelscope_endpoint",
        "MODELYARD_MODELSCOPE_ENDPOINT",
        str,
        "ModelScope endpoint (default https://www.modelscope.cn).",
    ),
    Setting(
        "models_root",
        "MODELYARD_MODELS_ROOT",
        Path,
        "Where pulls and imports go unless --to says otherwise (default <data-dir>/models).",
    ),
    Setting(
        "parallel_files", "MODELYARD_DOWNLOAD_PARALLEL_FILES", int, "Files of one task fetched at once (4)."
    ),
    Setting("parallel_tasks", "MODELYARD_DOWNLOAD_PARALLEL_TASKS", int, "Tasks that run at once (2)."),
    Setting(
        "stall_timeout_seconds",
        "MODELYARD_DOWNLOAD_STALL_TIMEOUT_SECONDS",
        float,
        "No byte for this long is a failed attempt, retried with Range (60).",
    ),
    Setting(
        "attempts_without_progress",
        "MODELYARD_DOWNLOAD_ATTEMPTS",
        int,
        "Failed attempts in a row without a new byte before a file fails the task (5).",
    ),
    Setting(
        "backoff_max_seconds",
        "MODELYARD_DOWNLOAD_BACKOFF_MAX_SECONDS",
        float,
        "Longest pause between attempts; pauses start at 1 s and double (30).",
    ),
    Setting(
        "hash_attempts",
        "MODELYARD_DOWNLOAD_HASH_ATTEMPTS",
        int,
        "Downloads of a file whose hash mismatches before the task fails naming it (2).",
    ),
    Setting(
        "headroom_bytes",
        "MODELYARD_DOWNLOAD_HEADROOM_BYTES",
        int,
        "Disk space that must stay free after a download or import: at least this (1 GiB) ...",
    ),
    Setting(
        "headroom_fraction",
        "MODELYARD_DOWNLOAD_HEADROOM_FRACTION",
        float,
        "... or this share of the download, whichever is larger (0.05).",
    ),
)

_TRANSFER_FIELDS = {
    "stall_timeout_seconds",
    "attempts_without_progress",
    "backoff_max_seconds",
    "hash_attempts",
}


@dataclass(frozen=True)
class DownloadOptions:
    hf_endpoint: str = HF_DEFAULT_ENDPOINT
    modelscope_endpoint: str = MODELSCOPE_DEFAULT_ENDPOINT
    # None: <data-dir>/models.
    models_root: Path | None = None
    parallel_files: int = 4
    parallel_tasks: int = 2
    transfer: TransferOptions = field(default_factory=TransferOptions)
    headroom: DiskHeadroom = field(default_factory=DiskHeadroom)
    # Free bytes where a path will live; tests pass their own to play a full disk.
    disk_space: DiskSpaceSource = free_bytes
    # How often running tasks' progress is written to the database.
    progress_interval_seconds: float = 1.0
    # How long a server shutdown waits for running tasks to stop before it leaves them queued.
    shutdown_grace_seconds: float = 5.0

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> DownloadOptions:
        values = os.environ if environ is None else environ
        options = cls()
        transfer = options.transfer
        headroom = options.headroom
        for setting in SETTINGS:
            text = values.get(setting.variable)
            if text is None or not text.strip():
                continue
            value = _parse(setting, text.strip())
            if setting.field in _TRANSFER_FIELDS:
                transfer = replace(transfer, **{setting.field: value})
            elif setting.field == "headroom_bytes":
                headroom = replace(headroom, minimum_bytes=value)
            elif setting.field == "headroom_fraction":
                headroom = replace(headroom, fraction=value)
            else:
                options = replace(options, **{setting.field: value})
        return replace(options, transfer=transfer, headroom=headroom)

    def source(self, hub: HubName) -> HubSource:
        """The hub's client (imported here: huggingface_hub is heavy for a CLI that never pulls)."""
        if hub == "huggingface":
            from modelyard.hub.huggingface import HuggingFaceSource

            return HuggingFaceSource(endpoint=self.hf_endpoint)
        from modelyard.hub.modelscope import ModelScopeSource

        return ModelScopeSource(endpoint=self.modelscope_endpoint)

    def endpoint(self, hub: HubName) -> str:
        return self.hf_endpoint if hub == "huggingface" else self.modelscope_endpoint

    def models_directory(self, data_models_dir: Path) -> Path:
        return self.models_root if self.models_root is not None else data_models_dir


def _parse(setting: Setting, text: str) -> Any:
    if setting.kind is str:
        if setting.field.endswith("endpoint") and not text.startswith(("http://", "https://")):
            raise InvalidInput(
                f"{setting.variable}={text!r} is not a URL", hint="write it like https://hf-mirror.com"
            )
        return text.rstrip("/")
    if setting.kind is Path:
        path = Path(text).expanduser()
        if not path.is_absolute():
            raise InvalidInput(f"{setting.variable}={text!r} is not an absolute path")
        return path
    try:
        number = setting.kind(text)
    except ValueError as error:
        raise InvalidInput(
            f"{setting.variable}={text!r} is not a{'n integer' if setting.kind is int else ' number'}",
            hint=setting.help,
        ) from error
    if number <= 0 or (setting.field == "headroom_fraction" and number >= 1):
        limit = "between 0 and 1" if setting.field == "headroom_fraction" else "above 0"
        raise InvalidInput(f"{setting.variable}={text!r} must be {limit}", hint=setting.help)
    return number
