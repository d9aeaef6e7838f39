"""The id that marks every engine this server installation launches (its data directory's).

Engines carry it (an env marker, a container label), so that a restarted server finds its own
engines, and two servers on one host (two data directories) never take or stop each other's.
It lives in ``<data-dir>/server-id``, created on first use.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

OWNER_FILE_NAME = "server-id"


def server_owner_id(data_dir: Path) -> str:
    path = data_dir / OWNER_FILE_NAME
    try:
        existing = path.read_text().strip()
    except FileNotFoundError:
        existing = ""
    if existing:
        return existing
    data_dir.mkdir(parents=True, exist_ok=True)
    owner = uuid.uuid4().hex
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process of this installation wrote it a moment ago
        return path.read_text().strip() or owner
    with os.fdopen(descriptor, "w") as handle:
        handle.write(owner + "\n")
    return owner
