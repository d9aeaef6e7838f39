"""Offline bundles: a model directory as one archive to carry to workers with no hub access.

A bundle is an uncompressed tar (weights do not compress) whose first member,
``modelyard-bundle.json``, is the model's manifest (``manifest.Manifest``: every file with its
size and SHA-256, the model's facts, where it came from), followed by every file under its
relative path. Both directions stream in chunks; nothing is held whole in memory.

- ``export_bundle`` hashes each file as it writes it and fails (deleting the partial archive) when
  a file no longer matches the manifest it was verified against.
- ``import_bundle`` writes each member to a part file while hashing it and refuses the bundle, naming
  the file, when a member is not in the manifest, has another size or hash, is not a regular file,
  or when a listed file is missing; nothing is moved into the destination until every file passed.

The manifest protects against corruption, not against someone who rewrites both a file and its
line in the manifest: compare the manifest's source and hashes with the hub's where that matters.

Usage::

    export_bundle(model_dir, manifest, Path("qwen3-8b.modelyard.tar"))
    manifest = import_bundle(Path("qwen3-8b.modelyard.tar"), Path("/models/qwen3-8b"))
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from modelyard.errors import InvalidInput
from modelyard.hub.download import PARTIAL_FOLDER
from modelyard.hub.manifest import Manifest
from modelyard.hub.transfer import StopSignal

BUNDLE_MANIFEST = "modelyard-bundle.json"
BUNDLE_SUFFIX = ".modelyard.tar"
MAXIMUM_MANIFEST_BYTES = 64 << 20
CHUNK_BYTES = 1 << 20

# Progress: (file path, bytes just read or written).
ByteCallback = Callable[[str, int], None]


class BundleRejected(InvalidInput):
    """An archive that cannot be imported as it is (or an export that would not match its manifest)."""

    code = "bundle_rejected"


class _HashingReader:
    """A file object that hashes and counts what is read through it (for ``TarFile.addfile``)."""

    def __init__(
        self, path: str, handle: BinaryIO, on_bytes: ByteCallback | None, stop: StopSignal | None
    ) -> None:
        self._path, self._handle = path, handle
        self._on_bytes, self._stop = on_bytes, stop
        self.sha256 = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        if self._stop is not None:
            self._stop.check()
        chunk = self._handle.read(size)
        self.sha256.update(chunk)
        if self._on_bytes is not None and chunk:
            self._on_bytes(self._path, len(chunk))
        return chunk


def export_bundle(
    directory: Path,
    manifest: Manifest,
    archive: Path,
    *,
    on_bytes: ByteCallback | None = None,
    stop: StopSignal | None = None,
) -> None:
    """Write ``directory``'s files, as ``manifest`` lists them, into ``archive`` (replaced at the end)."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(archive.name + ".partial")
    try:
        with tarfile.TarFile(partial, mode="w", format=tarfile.PAX_FORMAT, copybufsize=CHUNK_BYTES) as tar:
            document = json.dumps(manifest.to_json(), indent=2).encode("utf-8")
            header = tarfile.TarInfo(BUNDLE_MANIFEST)
            header.size, header.mode = len(document), 0o644
            tar.addfile(header, io.BytesIO(document))
            for file in manifest.files:
                path = directory / file.path
                try:
                    status = path.stat()
                except FileNotFoundError as error:
                    raise BundleRejected(
                        f"cannot export: {file.path} is missing from {directory}",
                        hint="restore the file (pull or import the model again), then export",
                    ) from error
                if status.st_size != file.size:
                    raise BundleRejected(
                        f"cannot export: {file.path} has {status.st_size} bytes, "
                        f"its manifest says {file.size}",
                        hint="the file changed since it was verified: pull or import the model again",
                    )
                member = tarfile.TarInfo(file.path)
                member.size, member.mode, member.mtime = file.size, 0o644, int(status.st_mtime)
                with path.open("rb") as handle:
                    reader = _HashingReader(file.path, handle, on_bytes, stop)
                    tar.addfile(member, reader)  # type: ignore[arg-type]
                if reader.sha256.hexdigest() != file.sha256:
                    raise BundleRejected(
                        f"cannot export: {file.path} has SHA-256 {reader.sha256.hexdigest()}, "
                        f"its manifest says {file.sha256}",
                        hint="the file changed since it was verified: pull or import the model again",
                    )
        os.replace(partial, archive)
    finally:
        partial.unlink(missing_ok=True)


def read_bundle_manifest(archive: Path) -> Manifest:
    """Only the manifest of ``archive`` (its first member), to plan an import."""
    try:
        with tarfile.open(archive, mode="r:") as tar:
            return _read_manifest(tar, archive)
    except (tarfile.TarError, EOFError) as error:
        raise BundleRejected(f"{archive} is not a readable tar archive: {error}") from error


def _read_manifest(tar: tarfile.TarFile, archive: Path) -> Manifest:
    first = tar.next()
    if first is None or first.name != BUNDLE_MANIFEST or not first.isfile():
        raise BundleRejected(
            f"{archive} is not a modelyard bundle: its first member is "
            f"{first.name if first else 'missing'!r}, not {BUNDLE_MANIFEST}",
            hint="bundles are written by `modelyard models export NAME FILE`",
        )
    if first.size > MAXIMUM_MANIFEST_BYTES:
        raise BundleRejected(f"{archive}: its manifest has {first.size} bytes, more than a manifest can")
    handle = tar.extractfile(first)
    assert handle is not None
    try:
        document = json.loads(handle.read())
    except (ValueError, UnicodeDecodeError) as error:
        raise BundleRejected(f"{archive}: its manifest is not JSON ({error})") from error
    try:
        return Manifest.from_json(document, where=f"the manifest of {archive}")
    except InvalidInput as error:
        raise BundleRejected(error.message, hint=error.hint) from error


def import_bundle(
    archive: Path,
    destination: Path,
    *,
    on_bytes: ByteCallback | None = None,
    stop: StopSignal | None = None,
) -> Manifest:
    """Verify every member of ``archive`` against its manifest and place the files in ``destination``.

    ``destination`` must be empty or missing. On any refusal nothing stays behind.
    """
    if destination.exists() and any(child.name != PARTIAL_FOLDER for child in destination.iterdir()):
        raise BundleRejected(
            f"cannot import into {destination}: it is not empty",
            hint="choose another directory with --to DIR, or remove that one first",
        )
    created = not destination.exists()
    staging = destination / PARTIAL_FOLDER
    try:
        with tarfile.open(archive, mode="r:") as tar:
            manifest = _read_manifest(tar, archive)
            _extract_members(tar, archive, manifest, staging, on_bytes, stop)
        for file in manifest.files:
            final = destination / file.path
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / f"{file.path}.part", final)
        shutil.rmtree(staging, ignore_errors=True)
        return manifest
    except (tarfile.TarError, EOFError) as error:
        _clean(destination, staging, created)
        raise BundleRejected(
            f"{archive} is damaged or truncated: {error}", hint="copy the archive again from its source"
        ) from error
    except BaseException:
        _clean(destination, staging, created)
        raise


def _clean(destination: Path, staging: Path, created: bool) -> None:
    shutil.rmtree(staging, ignore_errors=True)
    if created:
        shutil.rmtree(destination, ignore_errors=True)


def _extract_members(
    tar: tarfile.TarFile,
    archive: Path,
    manifest: Manifest,
    staging: Path,
    on_bytes: ByteCallback | None,
    stop: StopSignal | None,
) -> None:
    expected = {file.path: file for file in manifest.files}
    seen: set[str] = set()
    while (member := tar.next()) is not None:
        if stop is not None:
            stop.check()
        name = member.name
        if name not in expected:
            raise BundleRejected(
                f"{archive}: member {name!r} is not in its manifest", hint="the archive was altered"
            )
        if not member.isfile():
            raise BundleRejected(f"{archive}: {name} is not a regular file; bundles hold regular files only")
        if name in seen:
            raise BundleRejected(f"{archive}: {name} appears twice")
        file = expected[name]
        if member.size != file.size:
            raise BundleRejected(
                f"{archive}: {name} has {member.size} bytes, its manifest says {file.size}",
                hint="the archive is damaged or was altered: export it again",
            )
        part = staging / f"{name}.part"
        part.parent.mkdir(parents=True, exist_ok=True)
        handle = tar.extractfile(member)
        assert handle is not None
        digest = hashlib.sha256()
        with part.open("wb") as out:
            while chunk := handle.read(CHUNK_BYTES):
                if stop is not None:
                    stop.check()
                out.write(chunk)
                digest.update(chunk)
                if on_bytes is not None:
                    on_bytes(name, len(chunk))
        if digest.hexdigest() != file.sha256:
            raise BundleRejected(
                f"{archive}: {name} has SHA-256 {digest.hexdigest()}, its manifest says {file.sha256}",
                hint="the archive is damaged or was altered: export it again from a verified model",
            )
        seen.add(name)
    missing = [path for path in expected if path not in seen]
    if missing:
        raise BundleRejected(
            f"{archive}: missing from the archive: {', '.join(missing[:5])}"
            + (" ..." if len(missing) > 5 else ""),
            hint="the archive is truncated: copy it again",
        )
