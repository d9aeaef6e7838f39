"""What ``modelyard serve`` does before the app runs, each failure as one line that names the fix.

In order: the data directory must be writable (a read-only, full or foreign directory is named
with its cause), the database driver must be installed (``--database-url postgresql://`` needs
the ``postgres`` extra), the port is bound (so clients queue in its backlog instead of being
refused while the rest starts), then the database is opened and migrated.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
from pathlib import Path

from modelyard.errors import InvalidInput, ModelyardError

LISTEN_BACKLOG = 2048
_PROBE_NAME = ".modelyard-write-check"


class DataDirectoryUnusable(ModelyardError):
    code = "data_directory_unusable"


class DatabaseUnavailable(ModelyardError):
    code = "database_unavailable"


def _free_space(path: Path) -> str:
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        return "unknown"
    return f"{free / 1e6:.0f} MB" if free < 10e9 else f"{free / 1e9:.0f} GB"


def _cause(error: OSError, path: Path) -> tuple[str, str]:
    """(what is wrong, what to do) for an OSError on the data directory."""
    fix_elsewhere = "or pass another --data-dir (or set MODELYARD_DATA_DIR)"
    if error.errno == errno.EROFS:
        return "is on a read-only file system", f"mount it writable {fix_elsewhere}"
    if error.errno in (errno.EACCES, errno.EPERM):
        return "is not writable by this user", f"fix its owner or permissions {fix_elsewhere}"
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return (
            f"has no space left ({_free_space(path)} free)",
            f"free some space on that file system {fix_elsewhere}",
        )
    if error.errno == errno.EEXIST or (error.errno == errno.ENOTDIR and path.exists()):
        return "is a file, not a directory", f"move the file away {fix_elsewhere}"
    if error.errno == errno.ENOTDIR:
        return "cannot be created: a part of its path is a file", fix_elsewhere
    return f"cannot be written ({error.strerror})", fix_elsewhere


def check_data_directory(data_dir: Path) -> None:
    """Create ``data_dir`` if needed and prove it takes a write (a 64 kB file, synced, removed)."""
    probe = data_dir / _PROBE_NAME
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(descriptor, b"\0" * 65536)
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        probe.unlink()
    except OSError as error:
        raise data_directory_error(data_dir, error) from None


def data_directory_error(data_dir: Path, error: OSError) -> DataDirectoryUnusable:
    what, fix = _cause(error, data_dir)
    return DataDirectoryUnusable(f"the data directory {data_dir} {what}", hint=fix)


def check_database_driver(database_url: str) -> None:
    """PostgreSQL needs psycopg, which only the ``postgres`` extra installs."""
    if not database_url.startswith(("postgresql", "postgres:")):
        return
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise InvalidInput(
            "--database-url is a PostgreSQL URL, but its driver (psycopg) is not installed",
            hint="pip install 'modelyard[postgres]' (in a checkout: pip install -e '.[postgres]')",
        ) from None


def bind_listener(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """The server's listening socket, bound and listening now (uvicorn serves on it later).

    ``reuse_port``: the port will be shared by the gateway workers' sockets (``SO_REUSEPORT``).
    A plain bind is tried first, so a port another process holds (even one sharing it) is
    refused as before instead of being shared with it.
    """
    try:
        family, kind, protocol, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as error:
        raise InvalidInput(
            f"cannot listen on {host}:{port}: {error.strerror}", hint="pass an address with --host"
        ) from None
    listener = socket.socket(family, kind, protocol)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        if reuse_port:
            with socket.socket(family, kind, protocol) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(address)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        listener.bind(address)
        listener.listen(LISTEN_BACKLOG)
    except OSError as error:
        listener.close()
        raise InvalidInput(
            f"cannot listen on {host}:{port}: {error.strerror}",
            hint="is another modelyard already running? pick another port with --port",
        ) from None
    listener.set_inheritable(False)
    return listener


def describe_database_url(database_url: str) -> str:
    """The URL without its password, for messages."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(database_url).render_as_string(hide_password=True)
    except ArgumentError:
        return "the database URL"


def database_error(database_url: str, data_dir: Path, error: Exception) -> ModelyardError:
    """One line for a database that cannot be opened (SQLite file, or PostgreSQL server)."""
    detail = str(getattr(error, "orig", None) or error).strip().splitlines()[0]
    if database_url.startswith("sqlite"):
        return DatabaseUnavailable(
            f"cannot open the database {database_url.removeprefix('sqlite:///')}: {detail}",
            hint=f"check that {data_dir} is writable and has free space ({_free_space(data_dir)} free)",
        )
    return DatabaseUnavailable(
        f"cannot open the database {describe_database_url(database_url)}: {detail}",
        hint="check that PostgreSQL runs and the URL's user, password and database are right",
    )
