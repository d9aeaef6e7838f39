"""The data directory is the server's alone: the folder 0700, every file in it 0600.

It holds the database (SQLite), the admin password, the secret key, engine logs (which may hold
prompts or tokens an engine printed) and prepared models. ``secure_data_directory`` runs at
every start: it creates the folder 0700 and tightens what an older version, a copy or a loose
umask left readable by others; the files the server creates afterwards are made 0600 where they
are opened (the database file before SQLite opens it, engine logs by the process runtime).

Usage::

    tightened = secure_data_directory(settings.data_dir)   # paths whose modes were changed
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

logger = logging.getLogger(__name__)

DIRECTORY_MODE = 0o700
FILE_MODE = 0o600


def secure_data_directory(data_dir: Path) -> list[Path]:
    """Create ``data_dir`` (0700) and take group and other access away from everything in it."""
    data_dir.mkdir(parents=True, exist_ok=True, mode=DIRECTORY_MODE)
    tightened: list[Path] = []
    for root, directories, files in os.walk(data_dir):
        root_path = Path(root)
        for path, wanted in [(root_path, DIRECTORY_MODE)] + [(root_path / name, FILE_MODE) for name in files]:
            try:
                status = path.lstat()
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(status.st_mode):
                continue
            mode = stat.S_IMODE(status.st_mode)
            if mode & 0o077:
                # Keep the owner's bits (an executable stays executable for its owner).
                path.chmod((mode & 0o700) | (wanted & 0o700))
                tightened.append(path)
        directories[:] = [name for name in directories if not (root_path / name).is_symlink()]
    if tightened:
        logger.warning(
            "took group and other access away from %d path(s) in %s (e.g. %s)",
            len(tightened),
            data_dir,
            tightened[0],
        )
    return tightened
