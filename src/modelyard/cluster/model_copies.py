"""What runs on a worker for its model files: the inspection of ``models add --worker``, the
survey of every model's files there, and the receiver a push writes into.

These run on the worker's node as Ray tasks and actors pinned there (``NodeAffinity``, not
soft), started by the server (``server/model_survey.py``, ``cluster/model_push.py``); they
import nothing of the server.

The receiver writes each file as a pull does (``hub/transfer.py``): into
``<model dir>/.modelyard-partial/<path>.part``, appended, unbuffered, hashed as it arrives; a
later push starts a file at the bytes its part file holds (re-read into the hash first), and a
file whose size and SHA-256 match the manifest's is moved into place; a mismatch deletes the part
file and the sender sends that file again from byte 0.

Usage (on the server)::

    receiver = ray.remote(ModelReceiver).options(scheduling_strategy=on_node).remote("/models/qwen")
    start = ray.get(receiver.begin.remote("model.safetensors", size, sha256))  # {"offset": ...}
    ray.get(receiver.write.remote("model.safetensors", start["offset"], chunk))
    ray.get(receiver.finish.remote("model.safetensors"))                        # {"problem": None}
"""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path
from typing import Any

from modelyard.hub.download import PARTIAL_FOLDER
from modelyard.hub.hashing import StreamingDigest, digest_file
from modelyard.hub.manifest import directory_files

# A worker's copy of a model, as the API shows it (``WorkerModel.state``).
VERIFIED, PRESENT, MISSING, INCOMPLETE, DAMAGED, INVALID, COPYING = (
    "verified",
    "present",
    "missing",
    "incomplete",
    "damaged",
    "invalid",
    "copying",
)
# The states a replica may be placed on.
SERVABLE_STATES = (VERIFIED, PRESENT)
PROBLEMS_SHOWN = 5


def fingerprint(directory: Path, paths: list[str]) -> str:
    """Sizes and modification times of ``paths``: a file changed since its hash was checked
    changes this (a stat each, no reading)."""
    lines = []
    for path in sorted(paths):
        try:
            status = (directory / path).stat()
        except OSError:
            lines.append(f"{path} missing")
            continue
        lines.append(f"{path} {status.st_size} {status.st_mtime_ns}")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def listing(directory: Path) -> list[dict[str, Any]]:
    """Every file of ``directory`` with its size (partial copies left out)."""
    return [{"path": path, "size": (directory / path).stat().st_size} for path in directory_files(directory)]


def inspect_on_worker(path: str) -> dict[str, Any]:
    """``models add --worker``: the doctor's inspection of ``path`` on this node (config,
    tokenizer, weight headers and sizes, as ``models add`` does on the server), and the files
    with their sizes. ``error`` says why it cannot be served here."""
    from modelyard.modeldir import inspect_model_directory

    directory = Path(path)
    host = socket.gethostname()
    if not directory.is_dir():
        what = "does not exist" if not directory.exists() else "is not a directory"
        return {"error": f"{path} {what}", "host": host}
    report = inspect_model_directory(directory)
    if not report.valid:
        hint = f" (did you mean {report.suggestion}?)" if report.suggestion else ""
        return {"error": f"{path} is not a servable model: " + "; ".join(report.reasons) + hint, "host": host}
    return {"error": None, "host": host, "report": report.to_json(), "files": listing(directory)}


def _size_problems(directory: Path, files: list[dict[str, Any]]) -> list[str]:
    problems: list[str] = []
    for file in files:
        try:
            size = (directory / str(file["path"])).stat().st_size
        except OSError:
            problems.append(f"{file['path']} missing")
            continue
        if size != int(file["size"]):
            problems.append(f"{file['path']} has {size} bytes, expected {file['size']}")
    return problems


def survey_models(models: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each model's files on this node. ``models``: ``{"name", "path", "files": [{"path",
    "size"}] or None}``; the answer by name: ``{"state", "reason", "problems", "fingerprint"}``
    (``state``: present, missing, incomplete, invalid; the server keeps ``verified`` while the
    fingerprint is the one its hashes were checked with)."""
    from modelyard.modeldir import inspect_model_directory

    answers: dict[str, dict[str, Any]] = {}
    for model in models:
        directory = Path(str(model["path"]))
        files = model.get("files")
        answer: dict[str, Any] = {"state": PRESENT, "reason": "", "problems": [], "fingerprint": None}
        if not directory.is_dir():
            answer.update(state=MISSING, reason=f"{directory} does not exist on this worker")
        elif files and (problems := _size_problems(directory, files)):
            shown = "; ".join(problems[:PROBLEMS_SHOWN]) + (" ..." if len(problems) > PROBLEMS_SHOWN else "")
            answer.update(
                state=INCOMPLETE, reason=f"{len(problems)} of {len(files)} files: {shown}", problems=problems
            )
        else:
            report = inspect_model_directory(directory)
            if not report.valid:
                answer.update(state=INVALID, reason="; ".join(report.reasons))
            if files:
                answer["fingerprint"] = fingerprint(directory, [str(file["path"]) for file in files])
        answers[str(model["name"])] = answer
    return answers


class ReceiveError(Exception):
    """A write the receiver cannot take (out of order, unknown file); the sender starts that file again."""


class ModelReceiver:
    """One push's files into ``directory`` on this node: ``begin``, ``write`` in order, ``finish``."""

    def __init__(self, directory: str) -> None:
        self._directory = Path(directory)
        self._staging = self._directory / PARTIAL_FOLDER
        self._files: dict[str, tuple[int, str, StreamingDigest]] = {}

    def _part(self, path: str) -> Path:
        return self._staging / f"{path}.part"

    def begin(self, path: str, size: int, sha256: str) -> dict[str, Any]:
        """Where the file starts: ``{"done": True}`` when it is in place with its size and
        SHA-256; else ``{"offset": N, "damaged": reason or None}`` (N: bytes its part file holds,
        re-read into the hash)."""
        final = self._directory / path
        damaged: str | None = None
        if final.is_file() and final.stat().st_size == size:
            actual = digest_file(final, size).sha256
            if actual == sha256:
                self._files.pop(path, None)
                return {"done": True}
            damaged = f"SHA-256 {actual}, expected {sha256}"
        elif final.is_file():
            damaged = f"{final.stat().st_size} bytes, expected {size}"
        part = self._part(path)
        part.parent.mkdir(parents=True, exist_ok=True)
        if part.exists() and part.stat().st_size <= size:
            digest = digest_file(part, size)
        else:
            part.unlink(missing_ok=True)
            digest = StreamingDigest(size)
        self._files[path] = (size, sha256, digest)
        return {"done": False, "offset": digest.bytes_seen, "damaged": damaged}

    def write(self, path: str, offset: int, data: bytes) -> int:
        """Append ``data`` at ``offset`` (which must be the bytes received so far); the bytes now."""
        if path not in self._files:
            raise ReceiveError(f"{path}: write before begin")
        size, _, digest = self._files[path]
        if offset != digest.bytes_seen:
            raise ReceiveError(f"{path}: a write at byte {offset}, the file has {digest.bytes_seen}")
        if digest.bytes_seen + len(data) > size:
            raise ReceiveError(f"{path}: {digest.bytes_seen + len(data)} bytes, more than its {size}")
        with self._part(path).open("ab", buffering=0) as out:
            out.write(data)
        digest.update(data)
        return digest.bytes_seen

    def finish(self, path: str) -> dict[str, Any]:
        """Check size and SHA-256; move the file into place, or delete it and say why not."""
        size, sha256, digest = self._files.pop(path)
        part = self._part(path)
        problem: str | None = None
        if digest.bytes_seen != size:
            problem = f"size {digest.bytes_seen} bytes, expected {size}"
        elif digest.sha256 != sha256:
            problem = f"SHA-256 {digest.sha256}, expected {sha256}"
        if problem is not None:
            part.unlink(missing_ok=True)
            return {"problem": problem}
        final = self._directory / path
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(part, final)
        return {"problem": None}

    def close(self, paths: list[str]) -> str:
        """Every file is in place: remove the staging folder; the fingerprint of ``paths``."""
        import shutil

        shutil.rmtree(self._staging, ignore_errors=True)
        return fingerprint(self._directory, paths)
