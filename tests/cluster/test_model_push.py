"""A push on the session's simulated Ray cluster (``tests/ray_cluster.py``): the server's side
(``cluster/model_push.RayModelPusher``, reading the files) and the receiver actor on the
worker's node (``cluster/model_copies.ModelReceiver``, writing them), through Ray as on a real
cluster. The nodes share this host's disk, so each test pushes into a directory of its own.

An interrupted push is stopped by its observer at about half the bytes (as a cancel or a server
shutdown stops it); the next push resumes each file at the bytes its part file holds. A flipped
byte in a part file or in a file in place is caught by the SHA-256 check on the worker and the
file is sent again.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from modelyard.cluster.model_push import PushResult, RayModelPusher, directory_source
from modelyard.hub.download import PARTIAL_FOLDER
from modelyard.hub.manifest import Manifest, build_manifest
from modelyard.hub.transfer import StopSignal, TransferStopped
from ray_cluster import SimulatedCluster, fake_gpu

CHUNK_BYTES = 64 << 10
BIG_FILE_BYTES = 1 << 20


@pytest.fixture(scope="module")
def push_worker(ray_cluster: SimulatedCluster) -> Iterator[str]:
    ray_cluster.add_worker("push-target", [fake_gpu("NVIDIA L4", 0, 24)])
    try:
        yield "push-target"
    finally:
        if "push-target" in ray_cluster.workers:
            ray_cluster.remove_worker("push-target")


class Observer:
    """Counts what the pusher reports; ``stop_after_bytes`` stops the push there (an interruption)."""

    def __init__(self, stop: StopSignal, stop_after_bytes: int | None = None) -> None:
        self.stop, self.stop_after_bytes = stop, stop_after_bytes
        self.received = 0
        self.started: dict[str, int] = {}
        self.restarted: list[str] = []
        self.verified: list[str] = []

    def file_started(self, path: str, bytes_on_disk: int) -> None:
        self.started[path] = bytes_on_disk

    def bytes_received(self, path: str, count: int) -> None:
        self.received += count
        if self.stop_after_bytes is not None and self.received >= self.stop_after_bytes:
            self.stop.stop("interrupted by the test")

    def file_restarted(self, path: str, reason: str) -> None:
        self.restarted.append(f"{path}: {reason}")

    def attempt_failed(self, path: str, reason: str, retry_in_seconds: float) -> None:
        raise AssertionError(f"a push does not retry by attempts: {path}: {reason}")

    def file_verified(self, path: str, sha256: str) -> None:
        self.verified.append(path)


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, Manifest]:
    directory = tmp_path / "source"
    directory.mkdir()
    (directory / "config.json").write_text('{"model_type": "qwen3"}')
    (directory / "weights").mkdir()
    (directory / "weights" / "model.safetensors").write_bytes(os.urandom(BIG_FILE_BYTES))
    return directory, build_manifest(directory)


@pytest.fixture
def pusher(push_worker: str) -> RayModelPusher:
    from modelyard.cluster.workers import WorkerDirectory

    directory = WorkerDirectory()
    directory.read()
    return RayModelPusher(directory, chunk_bytes=CHUNK_BYTES)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _push(
    pusher: RayModelPusher, worker: str, source: Path, manifest: Manifest, target: Path, observer: Observer
) -> PushResult:
    return pusher.push(worker, directory_source(source), manifest.files, str(target), observer, observer.stop)


def test_a_push_places_every_file_with_its_hash_and_a_second_push_sends_nothing(
    pusher: RayModelPusher, push_worker: str, source: tuple[Path, Manifest], tmp_path: Path
) -> None:
    directory, manifest = source
    target = tmp_path / "on-the-worker"
    result = _push(pusher, push_worker, directory, manifest, target, Observer(StopSignal()))
    assert result.bytes_sent == manifest.size_bytes
    for file in manifest.files:
        assert _sha256(target / file.path) == file.sha256
    assert not (target / PARTIAL_FOLDER).exists()
    again = _push(pusher, push_worker, directory, manifest, target, Observer(StopSignal()))
    assert again.bytes_sent == 0 and again.files_in_place == len(manifest.files)


def test_an_interrupted_push_resumes_each_file_at_its_offset(
    pusher: RayModelPusher, push_worker: str, source: tuple[Path, Manifest], tmp_path: Path
) -> None:
    directory, manifest = source
    target = tmp_path / "on-the-worker"
    half = manifest.size_bytes // 2
    first = Observer(StopSignal(), stop_after_bytes=half)
    with pytest.raises(TransferStopped):
        _push(pusher, push_worker, directory, manifest, target, first)
    part = target / PARTIAL_FOLDER / "weights" / "model.safetensors.part"
    kept = part.stat().st_size
    assert 0 < kept < BIG_FILE_BYTES and not (target / "weights" / "model.safetensors").exists()
    second = Observer(StopSignal())
    result = _push(pusher, push_worker, directory, manifest, target, second)
    assert second.started["weights/model.safetensors"] == kept
    assert result.resumed_files == 1 and result.resumed_bytes == kept
    sent_before = first.received
    assert result.bytes_sent == manifest.size_bytes - sent_before
    print(
        f"interrupted at {sent_before} of {manifest.size_bytes} bytes; the resumed push sent "
        f"{result.bytes_sent} ({result.bytes_sent / manifest.size_bytes:.0%} of the model)"
    )
    assert _sha256(target / "weights" / "model.safetensors") == _sha256(
        directory / "weights" / "model.safetensors"
    )


def test_a_flipped_byte_in_an_interrupted_copy_is_caught_on_the_worker_and_the_file_sent_again(
    pusher: RayModelPusher, push_worker: str, source: tuple[Path, Manifest], tmp_path: Path
) -> None:
    directory, manifest = source
    target = tmp_path / "on-the-worker"
    with pytest.raises(TransferStopped):
        _push(pusher, push_worker, directory, manifest, target, Observer(StopSignal(), BIG_FILE_BYTES // 2))
    part = target / PARTIAL_FOLDER / "weights" / "model.safetensors.part"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0x01
    part.write_bytes(bytes(data))
    observer = Observer(StopSignal())
    result = _push(pusher, push_worker, directory, manifest, target, observer)
    assert result.resent_files == ["weights/model.safetensors"]
    assert any("SHA-256" in line and "sending it again" in line for line in observer.restarted)
    expected = next(file.sha256 for file in manifest.files if file.path == "weights/model.safetensors")
    assert _sha256(target / "weights" / "model.safetensors") == expected


def test_a_damaged_file_in_place_is_replaced_by_a_push(
    pusher: RayModelPusher, push_worker: str, source: tuple[Path, Manifest], tmp_path: Path
) -> None:
    directory, manifest = source
    target = tmp_path / "on-the-worker"
    _push(pusher, push_worker, directory, manifest, target, Observer(StopSignal()))
    weights = target / "weights" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[12345] ^= 0x80
    weights.write_bytes(bytes(data))
    result = _push(pusher, push_worker, directory, manifest, target, Observer(StopSignal()))
    assert result.damaged_files == ["weights/model.safetensors"]
    assert result.bytes_sent == BIG_FILE_BYTES and result.files_in_place == 1
    assert _sha256(weights) == _sha256(directory / "weights" / "model.safetensors")


def test_an_exported_bundle_is_pushed_from_its_archive_with_the_same_checks(
    pusher: RayModelPusher, push_worker: str, source: tuple[Path, Manifest], tmp_path: Path
) -> None:
    from modelyard.cluster.model_push import bundle_source
    from modelyard.hub.bundle import export_bundle, read_bundle_manifest

    directory, manifest = source
    archive = tmp_path / "model.modelyard.tar"
    export_bundle(directory, manifest, archive)
    listed = read_bundle_manifest(archive)
    target = tmp_path / "from-the-bundle"
    first = Observer(StopSignal(), stop_after_bytes=BIG_FILE_BYTES // 2)
    with pytest.raises(TransferStopped):
        pusher.push(push_worker, bundle_source(archive), listed.files, str(target), first, first.stop)
    result = pusher.push(
        push_worker, bundle_source(archive), listed.files, str(target), Observer(StopSignal()), StopSignal()
    )
    assert result.resumed_files == 1 and result.bytes_sent == listed.size_bytes - first.received
    for file in listed.files:
        assert _sha256(target / file.path) == file.sha256
