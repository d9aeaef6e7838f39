"""The console's own gateway key, used by the playground and by benchmarks started from the console.

The gateway takes API keys only, and keys are stored hashed, so the console keeps the one key it
uses in ``<data-dir>/console-key`` (mode 0600, like the admin password) and makes it on first
use: a key named ``console`` allowed on every deployment of every project (``reach``
``every_project``), listed with the others. Revoking it on the keys page is honoured: the next
use makes a new one (``console-2``, ...). Admins and operators use it.

A member's playground uses a key of their own instead (``ensure_playground_key``), kept in
``<data-dir>/playground-keys/<user id>``: ``playground-<name>``, owned by the member, reaching the
deployments of the member's projects only (``reach`` ``member_projects``), so the playground
cannot cross into another project's deployments.

Usage::

    key, created = ensure_console_key(session, console_key_file(data_dir))   # created: invalidate
    key, created = ensure_playground_key(session, playground_key_file(data_dir, user.id), user.id)
"""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelyard.errors import NotFound
from modelyard.services.key_hashing import hash_key
from modelyard.services.keys import create_key
from modelyard.services.users import write_password_file
from modelyard.store.tables import ApiKey, Project, ProjectMember, User

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


def playground_key_file(data_dir: Path, user_id: int) -> Path:
    return data_dir / "playground-keys" / str(user_id)


def _free_name(session: Session, base: str) -> str:
    taken = set(session.scalars(select(ApiKey.name).where(ApiKey.name.startswith(base))))
    if base not in taken:
        return base
    number = 2
    while f"{base}-{number}" in taken:
        number += 1
    return f"{base}-{number}"


def _usable(session: Session, key_file: Path) -> tuple[str, ApiKey] | None:
    stored = _stored_key(key_file)
    if stored is None:
        return None
    record = session.scalar(select(ApiKey).where(ApiKey.key_hash == hash_key(stored)))
    if record is None or record.revoked_at is not None:
        return None
    return stored, record


def ensure_console_key(session: Session, key_file: Path) -> tuple[str, bool]:
    """The console's key and whether it was made or changed (the caller then drops the key cache)."""
    usable = _usable(session, key_file)
    if usable is not None:
        stored, record = usable
        if record.reach == "every_project":
            return stored, False
        # Made before projects: it reached every deployment then, and does again.
        record.reach = "every_project"
        session.commit()
        return stored, True
    created = create_key(session, _free_name(session, CONSOLE_KEY_NAME), None)
    created.record.reach = "every_project"
    session.commit()
    write_password_file(key_file, created.key)
    logger.info("made the console's gateway key %r (kept in %s)", created.record.name, key_file)
    return created.key, True


def ensure_playground_key(session: Session, key_file: Path, user_id: int) -> tuple[str, bool]:
    """Member ``user_id``'s playground key (reaching their projects' deployments only) and
    whether it was just made (the caller then drops the key cache)."""
    usable = _usable(session, key_file)
    if usable is not None and usable[1].owner_id == user_id and usable[1].reach == "member_projects":
        return usable[0], False
    user = session.get(User, user_id)
    if user is None:
        raise NotFound(f"no user with id {user_id}", hint="sign in again at /login")
    created = create_key(session, _free_name(session, f"playground-{user.username}"), None)
    created.record.owner_id = user_id
    created.record.reach = "member_projects"
    first_project = session.scalar(
        select(ProjectMember.project_id)
        .join(Project, Project.id == ProjectMember.project_id)
        .where(ProjectMember.user_id == user_id)
        .order_by(Project.name)
    )
    if first_project is not None:
        created.record.project_id = first_project
    session.commit()
    write_password_file(key_file, created.key)
    logger.info("made %s's playground key %r (kept in %s)", user.username, created.record.name, key_file)
    return created.key, True
