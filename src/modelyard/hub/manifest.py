"""A model's files as they must be: every path with its size and SHA-256, and the model's facts.

A pull writes one from the hub's hashes (checked as each file arrived); ``build_manifest`` hashes a
local directory; a bundle carries one. ``check_files`` compares a directory with it cheaply (every
file there, with its size: what the server checks before a deployment); ``verify_files`` re-reads
and hashes everything.

Usage::

    manifest = build_manifest(directory, facts={"architecture": "Qwen3ForCausalLM"})
    problems = check_files(directory, manifest.files)   # [] when every file is there
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from modelyard.errors import InvalidInput
from modelyard.hub.download import PARTIAL_FOLDER
from modelyard.hub.files import CHECK_KINDS, CheckKind, check_remote_path
from modelyard.hub.hashing import digest_file
from modelyard.hub.verification import Verification

MANIFEST_FORMAT = "modelyard-model-manifest/1"

ProblemKind = Literal["missing", "wrong-size", "hash-mismatch"]


@dataclass(frozen=True)
class ManifestFile:
    path: str
    size: int
    sha256: str
    # How the file was checked against its hub when it was pulled (``verification.py``); None
    # for a local directory's files and for manifests written before this was recorded.
    check: CheckKind | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"path": self.path, "size": self.size, "sha256": self.sha256}
        if self.check is not None:
            data["check"] = self.check
        return data


@dataclass(frozen=True)
class FileProblem:
    """A file that is not as the manifest says."""

    path: str
    problem: ProblemKind
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "problem": self.problem, "detail": self.detail}

    def __str__(self) -> str:
        return f"{self.path} ({self.detail})"


@dataclass
class Manifest:
    files: list[ManifestFile]
    # Where the files came from: "hf://ORG/NAME@<commit>", "ms://...", "local".
    source: str = "local"
    # The model's facts as the server read them (architecture, dtype, parameter_count, ...).
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def size_bytes(self) -> int:
        return sum(file.size for file in self.files)

    @property
    def verification(self) -> Verification | None:
        """How the files were checked against their hub; None when that was not recorded."""
        return Verification.from_checks({file.path: file.check for file in self.files})

    def to_json(self) -> dict[str, Any]:
        return {
            "format": MANIFEST_FORMAT,
            "source": self.source,
            "facts": self.facts,
            "size_bytes": self.size_bytes,
            "files": [file.to_json() for file in self.files],
        }

    @classmethod
    def from_json(cls, data: object, where: str = "the manifest") -> Manifest:
        """Parse and check a manifest; ``InvalidInput`` names what is wrong in ``where``."""
        if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise InvalidInput(
                f"{where} is not a modelyard model manifest (format {found!r}, expected {MANIFEST_FORMAT!r})",
                hint="bundles are written by `modelyard models export`",
            )
        entries = data.get("files")
        if not isinstance(entries, list) or not entries:
            raise InvalidInput(f"{where} lists no files")
        files: list[ManifestFile] = []
        seen: set[str] = set()
        for entry in entries:
            if not isinstance(entry, dict):
                raise InvalidInput(f"{where}: a file entry is {type(entry).__name__}, not an object")
            path, size, sha256 = entry.get("path"), entry.get("size"), entry.get("sha256")
            if (
                not isinstance(path, str)
                or not isinstance(size, int)
                or size < 0
                or not isinstance(sha256, str)
            ):
                raise InvalidInput(f"{where}: file entry {entry!r} needs a path, a size >= 0 and a sha256")
            check_remote_path(path, where)
            if path in seen:
                raise InvalidInput(f"{where} lists {path} twice")
            seen.add(path)
            check = next((kind for kind in CHECK_KINDS if kind == entry.get("check")), None)
            files.append(ManifestFile(path=path, size=size, sha256=sha256.lower(), check=check))
        facts = data.get("facts") if isinstance(data.get("facts"), dict) else {}
        return cls(files=files, source=str(data.get("source") or "local"), facts=dict(facts or {}))


def directory_files(directory: Path) -> list[str]:
    """Every regular file under ``directory`` as a POSIX relative path, sorted; partial downloads
    and symlinks that leave the directory are left out."""
    found: list[str] = []
    root = directory.resolve()
    for folder, subfolders, names in os.walk(directory):
        subfolders[:] = sorted(name for name in subfolders if name != PARTIAL_FOLDER)
        for name in names:
            path = Path(folder) / name
            if not path.is_file() or not path.resolve().is_relative_to(root):
                continue
            found.append(path.relative_to(directory).as_posix())
    return sorted(found)


def build_manifest(
    directory: Path,
    *,
    source: str = "local",
    facts: dict[str, Any] | None = None,
    on_bytes: Callable[[str, int], None] | None = None,
) -> Manifest:
    """Hash every file of ``directory`` (streamed) into a manifest."""
    files: list[ManifestFile] = []
    for relative in directory_files(directory):
        path = directory / relative
        callback = (lambda count, name=relative: on_bytes(name, count)) if on_bytes else None
        digest = digest_file(path, on_bytes=callback)
        files.append(ManifestFile(path=relative, size=digest.bytes_seen, sha256=digest.sha256))
    return Manifest(files=files, source=source, facts=dict(facts or {}))


def check_files(directory: Path, files: Sequence[ManifestFile]) -> list[FileProblem]:
    """The files that are missing or have the wrong size (no hashing: a stat per file)."""
    problems: list[FileProblem] = []
    for file in files:
        path = directory / file.path
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            problems.append(FileProblem(file.path, "missing", "missing"))
            continue
        if size != file.size:
            problems.append(FileProblem(file.path, "wrong-size", f"{size} bytes, expected {file.size}"))
    return problems


def verify_files(
    directory: Path, files: Sequence[ManifestFile], on_bytes: Callable[[str, int], None] | None = None
) -> list[FileProblem]:
    """``check_files``, then the SHA-256 of every file that has the right size."""
    problems = check_files(directory, files)
    bad = {problem.path for problem in problems}
    for file in files:
        if file.path in bad:
            continue
        callback = (lambda count, name=file.path: on_bytes(name, count)) if on_bytes else None
        digest = digest_file(directory / file.path, file.size, callback)
        if digest.sha256 != file.sha256:
            problems.append(
                FileProblem(file.path, "hash-mismatch", f"SHA-256 {digest.sha256}, expected {file.sha256}")
            )
    return problems
