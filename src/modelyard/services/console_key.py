"""The console's own gateway key, used by the playground and by benchmarks started from the console.

The gateway takes API keys only, and keys are stored hashed, so the console keeps the one key it
uses in ``<data-dir>/console-key`` (mode 0600, like the admin password) and makes it on first
use: a key named ``console`` allowed on every deployment, listed with the others. Revoking it
on the keys page is honoured: the next use makes a new one (``console-2``, ...).

Usage::

    key = ensure_console_key(session, settings.console_key_file)   # then invalidate the key cache
"""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelyard.services.key_hashing import hash_key
from modelyard.services.keys import create_key
from modelyard.services.users import write_password_file
from modelyard.store.tables import ApiKey

logger = logging.getLogger(__name__)

CONSOLE_KEY_NAME = "console"


def console_key_file(data_dir: Path) -> Path:
    return data_dir / "console-key"


def _stored_key(key_file: Path) -> str | None:
    try:
        text = key_file.read_text().strip()
    except FileNotFoundError:
        return None
    return text or None


def _free_name(session: Session) -> str:
    taken = set(session.scalars(select(ApiKey.name).where(ApiKey.name.startswith(CONSOLE_KEY_NAME))))
    if CONSOLE_KEY_NAME not in taken:
        return CONSOLE_KEY_NAME
    number = 2
    while f"{CONSOLE_KEY_NAME}-{number}" in taken:
        number += 1
    return f"{CONSOLE_KEY_NAME}-{number}"


def ensure_console_key(session: Session, key_file: Path) -> tuple[str, bool]:
    """The console's key and whether it was just made (the caller then drops the key cache)."""
    stored = _stored_key(key_file)
    if stored is not None:
        record = session.scalar(select(ApiKey).where(ApiKey.key_hash == hash_key(stored)))
        if record is not None and record.revoked_at is None:
            return stored, False
    created = create_key(session, _free_name(session), None)
    write_password_file(key_file, created.key)
    logger.info("made the console's gateway key %r (kept in %s)", created.record.name, key_file)
    return created.key, True
