"""Admin accounts: the bootstrap admin created at first start, and password changes.

At first start ``ensure_admin`` creates user ``admin`` with a generated password and writes it
to ``<data-dir>/admin-password`` (mode 0600) so that the CLI on the same host can use it.
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelyard.errors import NotFound, Unauthorized
from modelyard.services.password_hashing import hash_password, verify_password
from modelyard.services.password_policy import check_new_password
from modelyard.store.database import Database
from modelyard.store.tables import User, utc_now

logger = logging.getLogger(__name__)

ADMIN_USERNAME = "admin"


def write_password_file(password_file: Path, password: str) -> None:
    """Write ``password`` to ``password_file``, readable by its owner only (0600), atomically."""
    password_file.parent.mkdir(parents=True, exist_ok=True)
    temporary = password_file.with_name(password_file.name + ".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(password + "\n")
    os.chmod(temporary, 0o600)
    os.replace(temporary, password_file)


def ensure_admin(database: Database, password_file: Path) -> str | None:
    """Create ``admin`` with a generated password when no such user exists.

    Returns the new password (to print once), or None when the admin already exists.
    """
    with database.session() as session:
        if session.scalar(select(User).where(User.username == ADMIN_USERNAME)) is not None:
            return None
        password = secrets.token_urlsafe(18)
        write_password_file(password_file, password)
        session.add(
            User(username=ADMIN_USERNAME, password_hash=hash_password(password), is_admin=True, role="admin")
        )
        session.commit()
    logger.info("created user %r; its password is in %s", ADMIN_USERNAME, password_file)
    return password


def get_user(session: Session, username: str) -> User:
    user = session.scalar(select(User).where(User.username == username))
    if user is None:
        raise NotFound(f"user {username!r} does not exist")
    return user


def change_password(
    session: Session,
    username: str,
    current_password: str,
    new_password: str,
    password_file: Path | None = None,
) -> None:
    """Set a new password after checking the current one; rewrite ``password_file`` when given."""
    user = get_user(session, username)
    if not verify_password(current_password, user.password_hash):
        raise Unauthorized("the current password is wrong", hint="give the password you logged in with")
    check_new_password(new_password, username=username)
    user.password_hash = hash_password(new_password)
    user.password_changed_at = utc_now()
    session.commit()
    # After the commit: the file follows the database, never the other way round.
    if password_file is not None and username == ADMIN_USERNAME:
        write_password_file(password_file, new_password)
