"""Hashing files as they stream: SHA-256 always (the manifest keeps it), and the git blob id
(SHA-1 of ``"blob <size>\\0" + content``) when that is what the hub gives for a small file.

Usage::

    digest = StreamingDigest(size)
    for chunk in chunks:
        digest.update(chunk)
    problem = digest.mismatch(remote_file)  # None when it matches
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from modelyard.hub.files import RemoteFile

READ_CHUNK_BYTES = 4 << 20


class StreamingDigest:
    """SHA-256 and git blob SHA-1 of content whose total size is known in advance."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.bytes_seen = 0
        self._sha256 = hashlib.sha256()
        self._git_sha1 = hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)

    def update(self, chunk: bytes) -> None:
        self._sha256.update(chunk)
        self._git_sha1.update(chunk)
        self.bytes_seen += len(chunk)

    @property
    def sha256(self) -> str:
        return self._sha256.hexdigest()

    @property
    def git_blob_id(self) -> str:
        return self._git_sha1.hexdigest()

    def mismatch(self, file: RemoteFile) -> str | None:
        """Why the content is not ``file`` (size or hash, with both values), or None when it is."""
        if self.bytes_seen != file.size:
            return f"size {self.bytes_seen} bytes, the hub says {file.size}"
        expected = file.expected_hash
        if expected is None:
            return None
        kind, value = expected
        actual = self.sha256 if kind == "sha256" else self.git_blob_id
        if actual != value:
            label = "SHA-256" if kind == "sha256" else "git blob id"
            return f"{label} {actual}, expected {value}"
        return None


def digest_file(
    path: Path, size: int | None = None, on_bytes: Callable[[int], None] | None = None
) -> StreamingDigest:
    """Hash a file on disk (streamed, never whole in memory); ``size`` defaults to its length."""
    digest = StreamingDigest(path.stat().st_size if size is None else size)
    with path.open("rb") as handle:
        while chunk := handle.read(READ_CHUNK_BYTES):
            digest.update(chunk)
            if on_bytes is not None:
                on_bytes(len(chunk))
    return digest
