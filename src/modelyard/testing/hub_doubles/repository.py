"""The repository a hub double serves: a real model directory read into memory (tiny TEST models).

Each file gets what a hub would say of it: size, SHA-256, git blob id, and whether it is stored in
LFS (weights, tokenizers and anything over ``LFS_THRESHOLD_BYTES``, as Hugging Face's default
``.gitattributes`` would put them). For an LFS file the git blob id a hub lists is that of its
pointer file, as on the real Hub.

Usage::

    repository = RepositoryDouble.from_directory("modelyard-test/tiny-qwen3", model_dir)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

LFS_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".onnx", ".msgpack", ".h5")
LFS_NAMES = ("tokenizer.json",)
LFS_THRESHOLD_BYTES = 10 << 20


def git_blob_id(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content, usedforsecurity=False).hexdigest()


@dataclass(frozen=True)
class ServedFile:
    path: str
    content: bytes
    lfs: bool

    @property
    def size(self) -> int:
        return len(self.content)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content).hexdigest()

    @property
    def git_blob_id(self) -> str:
        return git_blob_id(self.pointer if self.lfs else self.content)

    @property
    def pointer(self) -> bytes:
        """The git LFS pointer file that git holds instead of the content."""
        return (
            f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\nsize {self.size}\n"
        ).encode()


@dataclass
class RepositoryDouble:
    repo_id: str
    commit: str
    files: dict[str, ServedFile] = field(default_factory=dict)

    @classmethod
    def from_directory(cls, repo_id: str, directory: Path, commit: str | None = None) -> RepositoryDouble:
        files: dict[str, ServedFile] = {}
        for path in sorted(directory.rglob("*")):
            if not path.is_file():
                continue
            relative = path.relative_to(directory).as_posix()
            content = path.read_bytes()
            lfs = (
                relative.endswith(LFS_SUFFIXES) or relative in LFS_NAMES or len(content) > LFS_THRESHOLD_BYTES
            )
            files[relative] = ServedFile(relative, content, lfs)
        digest = hashlib.sha1(repo_id.encode(), usedforsecurity=False)
        for file in files.values():
            digest.update(file.sha256.encode())
        return cls(repo_id=repo_id, commit=commit or digest.hexdigest(), files=files)

    def by_sha256(self, sha256: str) -> ServedFile | None:
        return next((file for file in self.files.values() if file.sha256 == sha256), None)

    @property
    def size_bytes(self) -> int:
        return sum(file.size for file in self.files.values())

    def shards(self) -> list[str]:
        return sorted(path for path in self.files if path.endswith(".safetensors"))
