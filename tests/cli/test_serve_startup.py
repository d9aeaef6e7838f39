"""`modelyard serve` as a subprocess: what it says when it cannot start, and what it answers at once.

Unusable data directories are real file systems: a tmpfs mounted read-only, or one too small to
write to, each in a private mount namespace (``unshare -m``) so nothing outlives the test. Those
cases need root and ``unshare`` and are skipped without them.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.ports import reserved_port

SERVE = [sys.executable, "-m", "modelyard.cli.main", "serve", "--no-demo"]
START_SECONDS = 60.0


def _free_port() -> int:
    return reserved_port()  # testing/ports.py: no race under pytest -n


def _environment(**extra: str) -> dict[str, str]:
    return {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **extra}


def _serve_fails(*arguments: str, shell_prefix: str = "") -> subprocess.CompletedProcess[str]:
    command = [*SERVE, "--port", str(_free_port()), *arguments]
    if shell_prefix:
        quoted = " ".join(f"'{part}'" for part in command)
        command = ["unshare", "-m", "sh", "-c", f"{shell_prefix} && exec {quoted}"]
    result = subprocess.run(command, capture_output=True, text=True, env=_environment(), timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return result


needs_mounts = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare for a tmpfs"
)


@needs_mounts
def test_read_only_data_directory_is_one_line_naming_it(tmp_path: Path) -> None:
    mount_point = tmp_path / "readonly"
    mount_point.mkdir()
    result = _serve_fails(
        "--data-dir", str(mount_point), shell_prefix=f"mount -t tmpfs -o ro,size=1m tmpfs '{mount_point}'"
    )
    assert f"the data directory {mount_point} is on a read-only file system" in result.stderr
    assert "--data-dir" in result.stderr


@needs_mounts
def test_full_data_directory_is_one_line_naming_it(tmp_path: Path) -> None:
    mount_point = tmp_path / "full"
    mount_point.mkdir()
    fill = f"dd if=/dev/zero of='{mount_point}/filler' bs=4k 2>/dev/null; true"
    result = _serve_fails(
        "--data-dir",
        str(mount_point),
        shell_prefix=f"mount -t tmpfs -o size=256k tmpfs '{mount_point}' && {fill}",
    )
    assert f"the data directory {mount_point} has no space left" in result.stderr
    assert "free some space" in result.stderr


def test_data_directory_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    not_a_directory = tmp_path / "data"
    not_a_directory.write_text("a file")
    result = _serve_fails("--data-dir", str(not_a_directory))
    assert f"the data directory {not_a_directory} is a file, not a directory" in result.stderr


def test_postgresql_without_its_driver_names_the_extra(tmp_path: Path) -> None:
    # psycopg blocked for this one process, as on an install without the postgres extra.
    script = (
        "import sys; sys.modules['psycopg'] = None; "
        "from modelyard.cli.main import main; sys.argv = ['modelyard'] + sys.argv[1:]; main()"
    )
    command = [sys.executable, "-c", script, "serve", "--no-demo", "--port", str(_free_port())]
    command += ["--data-dir", str(tmp_path / "data"), "--database-url", "postgresql://me@127.0.0.1:9/db"]
    result = subprocess.run(command, capture_output=True, text=True, env=_environment(), timeout=120)
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "psycopg" in result.stderr and "pip install 'modelyard[postgres]'" in result.stderr


def test_unreachable_postgresql_is_one_line_without_the_password(tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    url = f"postgresql://me:secret-word@127.0.0.1:{_free_port()}/db"
    result = _serve_fails("--data-dir", str(tmp_path / "data"), "--database-url", url)
    assert "cannot open the database" in result.stderr
    assert "secret-word" not in result.stderr


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = [*SERVE, "--port", str(port), "--data-dir", str(tmp_path / "data")]
        result = subprocess.run(command, capture_output=True, text=True, env=_environment(), timeout=120)
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr and "--port" in result.stderr


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    data_dir, port = tmp_path / "data", _free_port()
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen(
        [*SERVE, "--port", str(port), "--data-dir", str(data_dir)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=_environment(),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_SECONDS
        while not (data_dir / "cli-token").is_file() or not _answers(url):
            assert process.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, "the server did not answer"
            time.sleep(0.05)  # polling a child process's port: no event to await
        yield url, data_dir
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
        log.close()


def _answers(url: str) -> bool:
    try:
        httpx.get(f"{url}/api/v1/system", timeout=5, verify=shared_tls_context())
    except httpx.HTTPError:
        return False
    return True


def test_the_cli_token_lets_this_host_in_and_nothing_else_does(server: tuple[str, Path]) -> None:
    url, data_dir = server
    token_file = data_dir / "cli-token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text().strip()
    system = httpx.get(
        f"{url}/api/v1/system", headers={"Authorization": f"Bearer {token}"}, verify=shared_tls_context()
    )
    assert system.status_code == 200
    assert system.json()["demo"]["state"] == "skipped"
    refused = httpx.get(
        f"{url}/api/v1/system", headers={"Authorization": "Bearer not-the-token"}, verify=shared_tls_context()
    )
    assert refused.status_code == 401
    assert "cli-token" in refused.json()["error"]["hint"]
    # The CLI on this host uses the token: no password anywhere in its environment.
    (data_dir / "admin-password").rename(data_dir / "admin-password.moved")
    environment = _environment(MODELYARD_URL=url, MODELYARD_DATA_DIR=str(data_dir))
    environment.pop("MODELYARD_PASSWORD", None)
    listing = subprocess.run(
        [sys.executable, "-m", "modelyard.cli.main", "keys", "list", "--json"],
        capture_output=True,
        text=True,
        env=environment,
        timeout=60,
    )
    assert listing.returncode == 0, listing.stderr
    assert listing.stdout.strip() == "[]"
