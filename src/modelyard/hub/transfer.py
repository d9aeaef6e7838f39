"""One file from a hub to disk: resumable, with a stall timeout, retries with back-off, a hash
check, and a way to stop.

The bytes go to ``<part_path>`` (appended, unbuffered, so what arrived is on disk even if the
process is killed). A retry, or a later run after a restart, asks for the rest with
``Range: bytes=<bytes on disk>-`` and re-reads the bytes on disk into the hash first. No byte for
``stall_timeout_seconds`` is a failed attempt, as is a dropped connection or a 429/5xx answer;
``attempts_without_progress`` failures in a row with no new byte give up. When the whole file is
there its size and hash are checked against the hub's (``StreamingDigest.mismatch``); a mismatch
deletes it and fetches it again, up to ``hash_attempts`` downloads, then fails naming the file.
A verified file is moved to ``final_path``.

Usage::

    stop = StopSignal()
    with transfer_client(options) as client:
        sha256 = download_file(client, request, remote_file, part, final, options, observer, stop)
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

import httpx

from modelyard.hub.files import RemoteFile
from modelyard.hub.hashing import StreamingDigest, digest_file
from modelyard.hub.source import FileRequest

_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")
PERMANENT_STATUSES = frozenset({400, 401, 403, 404, 410, 451})


@dataclass(frozen=True)
class TransferOptions:
    """How hard a download tries. Defined once; ``DownloadOptions`` (``modelyard.downloads``) reads
    them from the environment."""

    # No byte for this long is a failed attempt (then a retry with Range), not a hang.
    stall_timeout_seconds: float = 60.0
    connect_timeout_seconds: float = 30.0
    # Failed attempts in a row without a new byte before a file fails.
    attempts_without_progress: int = 5
    # Back-off between attempts: initial, doubled each time, capped.
    backoff_initial_seconds: float = 1.0
    backoff_max_seconds: float = 30.0
    # Complete downloads of a file whose hash mismatches before the task fails naming it.
    hash_attempts: int = 2

    def backoff_seconds(self, failures: int) -> float:
        return float(min(self.backoff_max_seconds, self.backoff_initial_seconds * 2 ** max(failures - 1, 0)))


class TransferObserver(Protocol):
    """What a download reports, from its worker thread."""

    def file_started(self, path: str, bytes_on_disk: int) -> None: ...

    def bytes_received(self, path: str, count: int) -> None: ...

    def file_restarted(self, path: str, reason: str) -> None:
        """The bytes of ``path`` so far are gone (hash mismatch, ignored Range): it starts at 0."""

    def attempt_failed(self, path: str, reason: str, retry_in_seconds: float) -> None: ...

    def file_verified(self, path: str, sha256: str) -> None: ...


class TransferStopped(Exception):
    """The download was told to stop (cancelled, server shutdown, another file failed)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TransferFailed(Exception):
    """A file could not be downloaded or verified; ``reason`` says why, with the values."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class StopSignal:
    """Set from any thread to stop a download at its next chunk, back-off or stall timeout."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: str | None = None

    def stop(self, reason: str) -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        if self._event.is_set():
            raise TransferStopped(self.reason or "stopped")

    def wait(self, seconds: float) -> None:
        """Sleep ``seconds`` unless stopped first (then raise ``TransferStopped``)."""
        if self._event.wait(seconds):
            raise TransferStopped(self.reason or "stopped")


def transfer_client(options: TransferOptions) -> httpx.Client:
    """The HTTP client downloads share: redirects followed (the hub's CDN), the read timeout is the
    stall timeout. httpx drops ``Authorization`` when a redirect leaves the hub's origin."""
    timeout = httpx.Timeout(
        connect=options.connect_timeout_seconds,
        read=options.stall_timeout_seconds,
        write=options.stall_timeout_seconds,
        pool=options.connect_timeout_seconds,
    )
    return httpx.Client(timeout=timeout, follow_redirects=True, limits=httpx.Limits(max_connections=32))


class _Retryable(Exception):
    def __init__(self, reason: str, retry_after_seconds: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after_seconds = retry_after_seconds


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _resume(part_path: Path, file: RemoteFile, observer: TransferObserver) -> StreamingDigest:
    """The digest of the bytes already in ``part_path`` (re-read from disk), or a fresh one."""
    if part_path.exists():
        size = part_path.stat().st_size
        if size <= file.size:
            digest = digest_file(part_path, file.size)
            observer.file_started(file.path, digest.bytes_seen)
            return digest
        part_path.unlink()
    observer.file_started(file.path, 0)
    return StreamingDigest(file.size)


class _Download:
    """The attempts of one complete download of one file, appending to its part file."""

    def __init__(
        self,
        client: httpx.Client,
        request: FileRequest,
        file: RemoteFile,
        options: TransferOptions,
        observer: TransferObserver,
        stop: StopSignal,
        out: BinaryIO,
        digest: StreamingDigest,
    ) -> None:
        self.client, self.request, self.file = client, request, file
        self.options, self.observer, self.stop = options, observer, stop
        self.out, self.digest = out, digest

    def run(self) -> StreamingDigest:
        failures = 0
        while self.digest.bytes_seen < self.file.size:
            self.stop.check()
            before = self.digest.bytes_seen
            retry_after: float | None = None
            try:
                self._attempt()
                if self.digest.bytes_seen >= self.file.size:
                    break
                reason = f"the connection closed after {self.digest.bytes_seen} of {self.file.size} bytes"
            except httpx.ReadTimeout:
                reason = f"no bytes for {self.options.stall_timeout_seconds:g} s"
            except httpx.ConnectTimeout:
                reason = f"no connection within {self.options.connect_timeout_seconds:g} s"
            except httpx.TransportError as error:
                reason = (
                    f"the connection dropped at byte {self.digest.bytes_seen} of {self.file.size} "
                    f"({type(error).__name__})"
                )
            except _Retryable as error:
                reason, retry_after = str(error), error.retry_after_seconds
            failures = 0 if self.digest.bytes_seen > before else failures + 1
            if failures >= self.options.attempts_without_progress:
                raise TransferFailed(
                    self.file.path,
                    f"{reason}; gave up after {failures} attempts in a row without a new byte",
                )
            delay = self.options.backoff_seconds(max(failures, 1))
            if retry_after is not None:
                delay = max(delay, min(retry_after, self.options.backoff_max_seconds))
            self.observer.attempt_failed(self.file.path, reason, delay)
            self.stop.wait(delay)
        return self.digest

    def _restart(self, reason: str) -> None:
        """Throw away the bytes so far: the file starts over at byte 0."""
        self.out.truncate(0)
        self.digest = StreamingDigest(self.file.size)
        self.observer.file_restarted(self.file.path, reason)

    def _attempt(self) -> None:
        headers = dict(self.request.headers)
        offset = self.digest.bytes_seen
        if offset:
            headers["Range"] = f"bytes={offset}-"
        with self.client.stream("GET", self.request.url, headers=headers) as response:
            status = response.status_code
            if status == 416:
                self._restart(f"the hub refused the range bytes={offset}-; the file starts over")
                raise _Retryable(f"the hub refused the range bytes={offset}-")
            if status in PERMANENT_STATUSES:
                raise TransferFailed(
                    self.file.path, f"{response.url.host} answered {status} {response.reason_phrase}"
                )
            if status == 429 or status >= 500:
                raise _Retryable(
                    f"the hub answered {status} {response.reason_phrase}", _retry_after(response)
                )
            if status >= 300:
                raise TransferFailed(self.file.path, f"unexpected answer {status} from {response.url.host}")
            if offset and status == 200:
                self._restart("the server ignored the Range request; the file starts over")
            elif status == 206:
                match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
                if match is None or int(match.group(1)) != offset:
                    raise _Retryable(
                        f"the hub answered range {response.headers.get('Content-Range')!r} to bytes={offset}-"
                    )
            for chunk in response.iter_bytes():
                self.stop.check()
                self.out.write(chunk)
                self.digest.update(chunk)
                self.observer.bytes_received(self.file.path, len(chunk))
                if self.digest.bytes_seen > self.file.size:
                    return  # more than the file has: the size check refuses it


def download_file(
    client: httpx.Client,
    request: FileRequest,
    file: RemoteFile,
    part_path: Path,
    final_path: Path,
    options: TransferOptions,
    observer: TransferObserver,
    stop: StopSignal,
) -> str:
    """Download ``file`` to ``final_path`` through ``part_path``; return its SHA-256.

    Raises ``TransferFailed`` (naming the file and why) or ``TransferStopped``; the part file stays
    on disk for a later resume, except after a hash mismatch, which deletes it.
    """
    part_path.parent.mkdir(parents=True, exist_ok=True)
    problem = ""
    for download in range(1, options.hash_attempts + 1):
        digest = _resume(part_path, file, observer)
        with part_path.open("ab", buffering=0) as out:
            digest = _Download(client, request, file, options, observer, stop, out, digest).run()
        problem = digest.mismatch(file) or ""
        if not problem:
            final_path.parent.mkdir(parents=True, exist_ok=True)
            os.replace(part_path, final_path)
            observer.file_verified(file.path, digest.sha256)
            return digest.sha256
        part_path.unlink(missing_ok=True)
        if download < options.hash_attempts:
            observer.file_restarted(file.path, f"{problem}: deleted, fetching it again")
    raise TransferFailed(
        file.path, f"{problem} (after {options.hash_attempts} downloads; the file was deleted)"
    )
