"""A whole repository's chosen files into a model directory, several files at a time.

Partial files live in ``<target>/.modelyard-partial/<path>.part`` until verified, then move to
``<target>/<path>``; the partial folder is removed when every file is in place. A file recorded as
verified by an earlier run is skipped when it is still there with its size; a file found in place
without such a record is hashed and kept only if it matches. The first file that fails stops the
others (their parts stay for a resume) and is raised.

Usage::

    hashes = download_files(source, listing, files, target, options, observer, stop, parallel_files=4)
"""

from __future__ import annotations

import functools
import logging
import shutil
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import httpx

from modelyard.hub.files import RemoteFile, RepoListing
from modelyard.hub.hashing import digest_file
from modelyard.hub.source import HubSource
from modelyard.hub.transfer import (
    StopSignal,
    TransferFailed,
    TransferObserver,
    TransferOptions,
    download_file,
    transfer_client,
)

logger = logging.getLogger(__name__)

PARTIAL_FOLDER = ".modelyard-partial"


def part_path(target: Path, path: str) -> Path:
    return target / PARTIAL_FOLDER / f"{path}.part"


def bytes_on_disk(target: Path, file: RemoteFile) -> int:
    """How much of ``file`` is already in ``target`` (whole file in place, or its part)."""
    final = target / file.path
    if final.is_file() and final.stat().st_size == file.size:
        return file.size
    part = part_path(target, file.path)
    if part.is_file():
        return min(part.stat().st_size, file.size)
    return 0


def _already_in_place(
    target: Path, file: RemoteFile, verified: Mapping[str, str], observer: TransferObserver
) -> str | None:
    """The SHA-256 of ``file`` when it is already in place and right, else None."""
    final = target / file.path
    if not final.is_file() or final.stat().st_size != file.size:
        return None
    if file.path in verified:
        observer.file_started(file.path, file.size)
        observer.file_verified(file.path, verified[file.path])
        return verified[file.path]
    observer.file_started(file.path, 0)
    digest = digest_file(final, file.size, lambda count: observer.bytes_received(file.path, count))
    if digest.mismatch(file) is None:
        observer.file_verified(file.path, digest.sha256)
        return digest.sha256
    final.unlink()
    observer.file_restarted(file.path, "the file in place does not match the hub's hash; fetching it again")
    return None


def _one_file(
    client: httpx.Client,
    source: HubSource,
    listing: RepoListing,
    file: RemoteFile,
    target: Path,
    options: TransferOptions,
    observer: TransferObserver,
    stop: StopSignal,
    verified: Mapping[str, str],
) -> str:
    stop.check()
    try:
        existing = _already_in_place(target, file, verified, observer)
        if existing is not None:
            return existing
        request = source.file_request(listing, file)
        return download_file(
            client, request, file, part_path(target, file.path), target / file.path, options, observer, stop
        )
    except OSError as error:
        raise TransferFailed(
            file.path, f"cannot write it under {target}: {error.strerror or error}"
        ) from error


def _run_parallel(
    jobs: list[Callable[[], str]], parallel: int, on_error: Callable[[BaseException], None]
) -> list[str | BaseException]:
    """Run ``jobs`` on ``parallel`` daemon threads (a stalled read never holds the process at exit)."""
    results: list[str | BaseException] = [RuntimeError("not run")] * len(jobs)
    pending = list(range(len(jobs)))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not pending:
                    return
                index = pending.pop(0)
            try:
                results[index] = jobs[index]()
            except BaseException as error:  # handed to the caller, which raises it
                results[index] = error
                on_error(error)

    threads = [
        threading.Thread(target=worker, name=f"modelyard-download-{number}", daemon=True)
        for number in range(max(1, min(parallel, len(jobs))))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def download_files(
    source: HubSource,
    listing: RepoListing,
    files: Sequence[RemoteFile],
    target: Path,
    options: TransferOptions,
    observer: TransferObserver,
    stop: StopSignal,
    *,
    parallel_files: int = 4,
    verified: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Download ``files`` into ``target``; return ``{path: sha256}`` of every file.

    Raises ``TransferFailed`` (the first file that failed; the others are stopped) or
    ``TransferStopped`` (``stop`` was set). ``verified`` maps paths already verified by an earlier
    run to their SHA-256.
    """
    target.mkdir(parents=True, exist_ok=True)
    known = dict(verified or {})
    ordered = sorted(files, key=lambda item: item.path)

    def stop_others(error: BaseException) -> None:
        if isinstance(error, TransferFailed):
            stop.stop(f"stopped because {error.path} failed")

    with transfer_client(options) as client:
        jobs: list[Callable[[], str]] = [
            functools.partial(
                _one_file, client, source, listing, file, target, options, observer, stop, known
            )
            for file in ordered
        ]
        outcomes = _run_parallel(jobs, parallel_files, stop_others)
    failures = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    if failures:
        raise next((error for error in failures if isinstance(error, TransferFailed)), failures[0])
    shutil.rmtree(target / PARTIAL_FOLDER, ignore_errors=True)
    return {file.path: str(outcome) for file, outcome in zip(ordered, outcomes, strict=True)}
