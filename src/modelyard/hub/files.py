"""The files of a repository as a hub lists them, and which of them a pull takes.

A hub says, for every file, its size and a hash to check it against: the SHA-256 of an LFS file
(Hugging Face) or of any file (ModelScope), otherwise the git blob id (SHA-1 of
``"blob <size>\\0" + content``) of a small file kept in git. ``select_files`` applies the user's
``--include`` / ``--exclude`` patterns (``fnmatch`` on the path) and the quantisation they pick.

Usage::

    listing = source.list_files(reference)
    chosen = select_files(listing.files, include=["*.safetensors", "*.json"], exclude=[], quantization=None)
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Literal

from modelyard.errors import InvalidInput
from modelyard.hub.reference import ModelReference

HashKind = Literal["sha256", "git-sha1"]
# How a downloaded file was checked against the hub, as the manifest and the API say it:
# its SHA-256, its git blob id (a SHA-1 of the blob, for small files kept in git), or only its
# size (the hub gave no hash: such a file is unverified).
CheckKind = Literal["sha256", "git-blob-id", "size"]
CHECK_KINDS: tuple[CheckKind, ...] = ("sha256", "git-blob-id", "size")

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SHA1 = re.compile(r"^[0-9a-f]{40}$")

# GGUF quantisation tags as llama.cpp names them, e.g. Q4_K_M, IQ3_XXS, Q8_0, BF16, MXFP4.
_QUANTIZATION = re.compile(
    r"(?<![A-Za-z0-9])(I?Q[1-8](?:_[0-9A-Z]+)*|BF16|F16|F32|FP16|FP8|MXFP4|NVFP4|TQ[12]_0)(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_QUANTIZED_SUFFIXES = (".gguf",)


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repository: where it goes (``path``, relative, POSIX) and how to check it."""

    path: str
    size: int
    sha256: str | None = None
    git_blob_id: str | None = None

    @property
    def expected_hash(self) -> tuple[HashKind, str] | None:
        """The strongest hash the hub gave: SHA-256 first, else the git blob id; None if neither."""
        if self.sha256:
            return "sha256", self.sha256
        if self.git_blob_id:
            return "git-sha1", self.git_blob_id
        return None

    @property
    def check(self) -> CheckKind:
        """How this file is checked when it arrives: by the strongest hash the hub gave, else by size."""
        expected = self.expected_hash
        if expected is None:
            return "size"
        return "sha256" if expected[0] == "sha256" else "git-blob-id"

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256, "git_blob_id": self.git_blob_id}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RemoteFile:
        return cls(
            path=str(data["path"]),
            size=int(data["size"]),
            sha256=data.get("sha256"),
            git_blob_id=data.get("git_blob_id"),
        )


@dataclass(frozen=True)
class RepoListing:
    """A repository's files at one revision; ``commit`` is the commit the revision resolved to
    (None where the hub does not say, as ModelScope's file list)."""

    reference: ModelReference
    commit: str | None
    files: list[RemoteFile] = field(default_factory=list)

    @property
    def revision(self) -> str | None:
        """What to download from: the resolved commit, so that every file comes from one snapshot."""
        return self.commit or self.reference.revision


def normalise_hash(value: str | None) -> str | None:
    """A hub's hash as lower-case hex, or None when it is not a SHA-256 or SHA-1 hex digest."""
    if value is None:
        return None
    text = value.strip().strip('"').removeprefix("W/").strip('"').lower()
    return text if _SHA256.match(text) or _SHA1.match(text) else None


def hash_from_etag(etag: str | None) -> tuple[str | None, str | None]:
    """``(sha256, git_blob_id)`` read from an ETag: 64 hex digits are a SHA-256, 40 a git blob id."""
    value = normalise_hash(etag)
    if value is None:
        return None, None
    return (value, None) if len(value) == 64 else (None, value)


def check_remote_path(path: str, repository: str) -> str:
    """Refuse a file path that would land outside the model directory (absolute, ``..``, backslashes)."""
    pure = PurePosixPath(path)
    if (
        not path
        or "\\" in path
        or "\x00" in path
        or pure.is_absolute()
        or any(part in ("..", ".", "") for part in path.split("/"))
    ):
        raise InvalidInput(
            f"{repository} lists a file named {path!r}, which would land outside the model directory",
            hint="this repository cannot be pulled as it is; report it to its owner",
        )
    return path


def quantization_of(path: str) -> str | None:
    """The quantisation tag in a GGUF file's path (``Q4_K_M``), upper-cased; None for other files."""
    if not path.lower().endswith(_QUANTIZED_SUFFIXES):
        return None
    matches = _QUANTIZATION.findall(PurePosixPath(path).name) or _QUANTIZATION.findall(path)
    return matches[-1].upper() if matches else None


def known_quantizations(files: Sequence[RemoteFile]) -> list[str]:
    return sorted({tag for tag in (quantization_of(file.path) for file in files) if tag})


def _matches(path: str, patterns: Sequence[str]) -> bool:
    name = PurePosixPath(path).name
    return any(
        fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(name, pattern) for pattern in patterns
    )


def select_files(
    files: Sequence[RemoteFile],
    *,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    quantization: str | None = None,
) -> list[RemoteFile]:
    """The files a pull takes: included (all when no pattern), not excluded, of the chosen quantisation.

    A pattern matches the whole path or the file name (``*.safetensors`` matches ``sub/a.safetensors``).
    ``quantization`` keeps, among the GGUF files, only those tagged with it (other files stay).
    Raises ``InvalidInput`` when nothing is left, naming what there was.
    """
    chosen = [file for file in files if not include or _matches(file.path, include)]
    chosen = [file for file in chosen if not _matches(file.path, exclude)]
    if quantization:
        wanted = quantization.strip().upper()
        available = known_quantizations(chosen)
        if wanted not in available:
            raise InvalidInput(
                f"no file of quantisation {wanted!r} in this repository",
                hint=(
                    f"it has: {', '.join(available)}"
                    if available
                    else "it has no GGUF files; for safetensors checkpoints the quantisation is a "
                    "separate repository (e.g. ORG/NAME-FP8)"
                ),
            )
        chosen = [file for file in chosen if not _is_gguf(file) or quantization_of(file.path) == wanted]
    if not chosen:
        shown = ", ".join(file.path for file in files[:8]) + (", ..." if len(files) > 8 else "")
        raise InvalidInput(
            "the --include/--exclude patterns leave no file to download",
            hint=f"the repository has: {shown}" if files else "the repository has no files",
        )
    return chosen


def _is_gguf(file: RemoteFile) -> bool:
    return file.path.lower().endswith(_QUANTIZED_SUFFIXES)
