"""The cluster token: one secret shared by the head, every worker and the server (Ray's token
authentication). Made at the first ``serve --cluster`` in ``<data-dir>/cluster-token`` (0600)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

TOKEN_FILE_NAME = "cluster-token"
TOKEN_BYTES = 32


def cluster_token(data_dir: Path) -> str:
    """The installation's cluster token, made on first use."""
    path = data_dir / TOKEN_FILE_NAME
    try:
        existing = path.read_text().strip()
    except FileNotFoundError:
        existing = ""
    if existing:
        return existing
    data_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(TOKEN_BYTES)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(token + "\n")
    return token
