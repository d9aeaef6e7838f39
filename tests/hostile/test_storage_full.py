"""A server whose disk fills up: writes are answered 507 in the documented shape, nothing stored
is lost, and writes work again once there is space.

The data directory is a real, small filesystem (a tmpfs mounted for the test, which needs root,
as CI has); the disk is filled by a file the test writes until the kernel says ENOSPC.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import HostileTarget, start_server, stop_server

FILESYSTEM_BYTES = 48 * 1024 * 1024


@contextlib.contextmanager
def small_filesystem(mount_point: Path) -> Iterator[Path]:
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={FILESYSTEM_BYTES},mode=0700", "tmpfs", str(mount_point)],
        check=True,
    )
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(filesystem: Path) -> Path:
    """Write a file until the filesystem is full; return it (delete it to free the space)."""
    filler = filesystem / "filler"
    block = b"\0" * (1024 * 1024)
    with open(filler, "wb", buffering=0) as handle:
        for size in (len(block), 4096, 1):
            try:
                while True:
                    handle.write(block[:size])
            except OSError as error:
                assert error.errno == errno.ENOSPC, error
    return filler


@pytest.fixture
def full_disk_target(tmp_path: Path) -> Iterator[tuple[HostileTarget, Path]]:
    with small_filesystem(tmp_path / "disk") as disk:
        server = start_server(disk / "data", tmp_path / "serve.log")
        try:
            yield server, disk
        finally:
            stop_server(server)


def test_a_write_on_a_full_disk_is_a_507_and_loses_nothing(
    full_disk_target: tuple[HostileTarget, Path],
) -> None:
    target, disk = full_disk_target
    with target.client(admin=True) as client:
        assert client.post("/api/v1/keys", json={"name": "before"}).status_code == 201
        filler = fill(disk)
        refused = [client.post("/api/v1/keys", json={"name": f"during-{index}"}) for index in range(3)]
        listed_while_full = client.get("/api/v1/keys")
        filler.unlink()
        after = client.post("/api/v1/keys", json={"name": "after"})
        names = [key["name"] for key in client.get("/api/v1/keys").json()]
    for response in refused:
        assert response.status_code == 507, response.text
        error = response.json()["error"]
        assert error["code"] == "storage_full"
        assert str(target.data_dir) in error["hint"]
    assert listed_while_full.status_code == 200
    assert after.status_code == 201, after.text
    assert names == ["before", "after"]
