"""How a model's files were checked against their hub, file by file, and what that makes the model.

Each file of a pull is checked when it arrives (``RemoteFile.check``): by the SHA-256 the hub gave
(LFS files on Hugging Face, every file on ModelScope), by its git blob id (a SHA-1 of the blob:
small files Hugging Face keeps in git), or, where the hub gave no hash at all (a mirror with none
in its listing and no ETag, a ModelScope listing without ``Sha256``), only by its size. Such a
file is **unverified**: a flipped byte in it would not be seen. A model with one is ``unverified``,
not ``valid``: it can be deployed, with a warning.

Usage::

    verification = Verification({file.path: file.check for file in files})
    verification.verified          # False when a file was checked by size only
    verification.sentence()        # "12 files checked by SHA-256, 3 by git blob id, 1 not checked: ..."
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from modelyard.hub.files import CHECK_KINDS, CheckKind

# The model state of a servable model with a file no hash was checked for.
UNVERIFIED = "unverified"
SHOWN_FILES = 6
_KINDS: dict[str, CheckKind] = {kind: kind for kind in CHECK_KINDS}
_HASH_LABELS: tuple[tuple[CheckKind, str], ...] = (("sha256", "SHA-256"), ("git-blob-id", "git blob id"))


def _files(count: int) -> str:
    return f"{count} file{'s' if count != 1 else ''}"


def shown_paths(paths: list[str]) -> str:
    shown = ", ".join(paths[:SHOWN_FILES])
    return shown + (f" and {len(paths) - SHOWN_FILES} more" if len(paths) > SHOWN_FILES else "")


@dataclass(frozen=True)
class Verification:
    """``checks``: every file's path and how it was checked against the hub."""

    checks: Mapping[str, CheckKind]

    def count(self, kind: CheckKind) -> int:
        return sum(1 for check in self.checks.values() if check == kind)

    @property
    def unverified_files(self) -> list[str]:
        """The files no hash was checked for, sorted."""
        return sorted(path for path, check in self.checks.items() if check == "size")

    @property
    def verified(self) -> bool:
        """Every file was checked by a hash (SHA-256 or git blob id)."""
        return not self.unverified_files

    def sentence(self) -> str:
        """What was checked, truthfully: "12 files checked by SHA-256, 3 by git blob id, 1 not
        checked: no hash given by the hub (config.json)"."""
        parts: list[str] = []
        for kind, label in _HASH_LABELS:
            count = self.count(kind)
            if count:
                parts.append(f"{count if parts else _files(count)} {'' if parts else 'checked '}by {label}")
        unverified = self.unverified_files
        if unverified:
            shown = str(len(unverified)) if parts else _files(len(unverified))
            parts.append(
                f"{shown} not checked: no hash given by the hub, only the size ({shown_paths(unverified)})"
            )
        return ", ".join(parts) if parts else "no files"

    def reason(self) -> str:
        """The model's reason for being ``unverified`` (empty when it is not)."""
        unverified = self.unverified_files
        if not unverified:
            return ""
        return (
            f"{_files(len(unverified))} not checked by any hash, the hub gave none (a flipped byte "
            f"would not be seen): {shown_paths(unverified)}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "verified": self.verified,
            "sha256_files": self.count("sha256"),
            "git_blob_id_files": self.count("git-blob-id"),
            "size_only_files": len(self.unverified_files),
            "unverified_files": self.unverified_files,
            "summary": self.sentence(),
        }

    @classmethod
    def from_checks(cls, checks: Mapping[str, str | None]) -> Verification | None:
        """From recorded checks; None when a file's check was never recorded (a local directory, a
        manifest written before checks were)."""
        known: dict[str, CheckKind] = {}
        for path, check in checks.items():
            kind = _KINDS.get(check or "")
            if kind is None:
                return None
            known[path] = kind
        return cls(known) if known else None
