"""Copying a model's files from the server's host to a worker, through Ray.

The transport is Ray itself: the server (a Ray driver) reads each file in chunks and hands them
to a ``ModelReceiver`` actor pinned to the worker's node (``cluster/model_copies.py``), which
appends them to a part file there, hashing as they arrive. Ray already connects every host of
the cluster, with token authentication, over the ports a cluster opens anyway; so a push needs
no port of its own, no second credential, and no route from the worker back to the server's
HTTP port (which may be bound to loopback or sit behind a proxy). Each chunk goes through Ray's
object store (one copy on each side); ``IN_FLIGHT_CHUNKS`` writes are kept in flight so that the
network and the worker's disk stay busy.

Per file, as a pull does it (``hub/transfer.py``): the receiver says how many bytes its part
file already holds (an interrupted push resumes there, by file and offset), the rest is sent,
and the file is moved into place only when its size and SHA-256 match the manifest's; a mismatch
deletes it and it is sent again from byte 0, up to ``hash_attempts`` times, then the push fails
naming the file. A file already in place with its size and hash is not sent.

Usage::

    pusher = RayModelPusher(directory)               # the server's WorkerDirectory
    result = pusher.push("gpu-2", source_dir, manifest.files, "/models/qwen", observer, stop)
    result.bytes_sent, result.resumed_files
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from modelyard.hub.manifest import ManifestFile
from modelyard.hub.transfer import StopSignal, TransferFailed, TransferObserver

logger = logging.getLogger(__name__)

CHUNK_BYTES = 8 << 20
IN_FLIGHT_CHUNKS = 4
HASH_ATTEMPTS = 2


class WorkerLookup(Protocol):
    def node_id_of(self, worker: str) -> str | None:
        """The Ray node id of a ready worker by name; None when no ready worker has that name."""


# Where a file's bytes come from on the server's host: (path in the model) -> (open file, offset
# of the file's first byte in it). A model directory: the file itself at 0; a bundle: the archive
# at the member's data offset.
SourceOpener = Callable[[str], tuple[BinaryIO, int]]


def directory_source(directory: Path) -> SourceOpener:
    def open_file(path: str) -> tuple[BinaryIO, int]:
        return (directory / path).open("rb"), 0

    return open_file


def bundle_source(archive: Path) -> SourceOpener:
    """The files of a bundle (``hub/bundle.py``), read in place from the archive: each member's
    data starts at its offset in the tar (an uncompressed archive), so a resume seeks there."""
    import tarfile

    with tarfile.open(archive, mode="r:") as tar:
        offsets = {member.name: member.offset_data for member in tar.getmembers() if member.isfile()}

    def open_file(path: str) -> tuple[BinaryIO, int]:
        if path not in offsets:
            raise TransferFailed(path, f"it is not a member of {archive}")
        return archive.open("rb"), offsets[path]

    return open_file


@dataclass
class PushResult:
    files: int = 0
    bytes_sent: int = 0
    # Until the receiver on the worker answered (a Ray worker process started there), then the rest.
    receiver_start_seconds: float = 0.0
    copy_seconds: float = 0.0
    # Files that were already in place and verified (nothing sent).
    files_in_place: int = 0
    # Files continued from an interrupted push's part file, and the bytes they kept.
    resumed_files: int = 0
    resumed_bytes: int = 0
    # Files sent again after a hash mismatch, and files in place that did not match.
    resent_files: list[str] = field(default_factory=list)
    damaged_files: list[str] = field(default_factory=list)
    fingerprint: str | None = None

    def sentence(self, total_bytes: int) -> str:
        from modelyard.hub.disk import format_size

        rate = f", {format_size(int(self.bytes_sent / self.copy_seconds))}/s" if self.copy_seconds > 0 else ""
        parts = [
            f"{self.files} files, {format_size(total_bytes)}: sent {format_size(self.bytes_sent)} in "
            f"{self.copy_seconds:.1f} s{rate} (the receiver on the worker started in "
            f"{self.receiver_start_seconds:.1f} s)"
        ]
        if self.files_in_place:
            parts.append(f"{self.files_in_place} already in place with their SHA-256")
        if self.resumed_files:
            parts.append(
                f"{self.resumed_files} resumed where an earlier push stopped "
                f"({format_size(self.resumed_bytes)} kept)"
            )
        if self.damaged_files:
            parts.append(f"replaced damaged {', '.join(self.damaged_files[:5])}")
        if self.resent_files:
            parts.append(f"sent again after a hash mismatch: {', '.join(self.resent_files[:5])}")
        return "; ".join(parts) + "; every SHA-256 checked on the worker"


class RayModelPusher:
    """Pushes through a ``ModelReceiver`` actor on the worker's node (blocking: run it in a thread)."""

    def __init__(self, workers: WorkerLookup, *, chunk_bytes: int = CHUNK_BYTES) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from modelyard.cluster.model_copies import ModelReceiver

        self._ray = ray
        self._strategy = NodeAffinitySchedulingStrategy
        self._receiver_class: Any = ray.remote(ModelReceiver)
        self._workers = workers
        self._chunk_bytes = chunk_bytes

    def push(
        self,
        worker: str,
        source: SourceOpener,
        files: Sequence[ManifestFile],
        target_dir: str,
        observer: TransferObserver,
        stop: StopSignal,
    ) -> PushResult:
        """Copy ``files`` into ``target_dir`` on ``worker``; ``TransferFailed`` names the file,
        ``TransferStopped`` when ``stop`` is set (the part files stay for a resume)."""
        node_id = self._workers.node_id_of(worker)
        if node_id is None:
            raise TransferFailed("", f"worker {worker} is not ready (see `modelyard workers`)")
        receiver: Any = self._receiver_class.options(
            num_cpus=0, scheduling_strategy=self._strategy(node_id=node_id, soft=False)
        ).remote(target_dir)
        result = PushResult(files=len(files))
        started = time.monotonic()
        try:
            self._call(receiver.__ray_ready__.remote(), "")
            result.receiver_start_seconds = time.monotonic() - started
            for file in files:
                self._push_file(receiver, source, file, observer, stop, result)
            result.fingerprint = self._call(receiver.close.remote([file.path for file in files]), "")
            result.copy_seconds = time.monotonic() - started - result.receiver_start_seconds
        finally:
            self._ray.kill(receiver)
        return result

    def _call(self, reference: Any, path: str) -> Any:
        try:
            return self._ray.get(reference)
        except self._ray.exceptions.RayActorError as error:
            raise TransferFailed(path, f"the worker's receiver is gone ({error})") from error
        except self._ray.exceptions.RayTaskError as error:
            cause = error.cause if isinstance(error.cause, Exception) else error
            if isinstance(cause, OSError):
                raise TransferFailed(
                    path, f"the worker cannot write it: {cause.strerror or cause}: {cause.filename or ''}"
                ) from error
            raise TransferFailed(path, f"the worker refused it: {cause}") from error

    def _push_file(
        self,
        receiver: Any,
        source: SourceOpener,
        file: ManifestFile,
        observer: TransferObserver,
        stop: StopSignal,
        result: PushResult,
    ) -> None:
        for attempt in range(1, HASH_ATTEMPTS + 1):
            stop.check()
            start = self._call(receiver.begin.remote(file.path, file.size, file.sha256), file.path)
            if start["done"]:
                observer.file_started(file.path, file.size)
                observer.file_verified(file.path, file.sha256)
                result.files_in_place += 1
                return
            if start.get("damaged") and file.path not in result.damaged_files:
                result.damaged_files.append(file.path)
                observer.file_restarted(
                    file.path, f"in place but damaged ({start['damaged']}): copying it again"
                )
            offset = int(start["offset"])
            observer.file_started(file.path, offset)
            if offset and attempt == 1:
                result.resumed_files += 1
                result.resumed_bytes += offset
            self._send(receiver, source, file, offset, observer, stop, result)
            problem = self._call(receiver.finish.remote(file.path), file.path)["problem"]
            if problem is None:
                observer.file_verified(file.path, file.sha256)
                return
            if attempt < HASH_ATTEMPTS:
                result.resent_files.append(file.path)
                observer.file_restarted(file.path, f"{problem} on the worker: deleted, sending it again")
            else:
                raise TransferFailed(
                    file.path, f"{problem} on the worker (after {HASH_ATTEMPTS} copies; the copy was deleted)"
                )

    def _send(
        self,
        receiver: Any,
        source: SourceOpener,
        file: ManifestFile,
        offset: int,
        observer: TransferObserver,
        stop: StopSignal,
        result: PushResult,
    ) -> None:
        handle, base = source(file.path)
        in_flight: list[tuple[Any, int]] = []

        def settle(keep: int) -> None:
            while len(in_flight) > keep:
                reference, count = in_flight.pop(0)
                self._call(reference, file.path)
                observer.bytes_received(file.path, count)
                result.bytes_sent += count

        try:
            handle.seek(base + offset)
            position = offset
            while position < file.size:
                if stop.is_set():
                    settle(0)  # what is in flight lands, so the part file ends on a chunk
                    stop.check()
                data = handle.read(min(self._chunk_bytes, file.size - position))
                if not data:
                    raise TransferFailed(
                        file.path, f"the server's copy ends at byte {position} of {file.size}"
                    )
                in_flight.append((receiver.write.remote(file.path, position, data), len(data)))
                position += len(data)
                settle(IN_FLIGHT_CHUNKS - 1)
            settle(0)
        finally:
            handle.close()
