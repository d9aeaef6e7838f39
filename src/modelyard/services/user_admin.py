"""Users made and changed by an admin: create with a role, change the role, disable or enable,
reset the password, remove. The bootstrap ``admin`` (``services/users.py``) is one of them.

The last enabled admin can be neither demoted, disabled nor removed: a server must keep someone
who can manage it.

Usage::

    user = create_user(session, "alice", "a long password", Role.MEMBER)
    user, changed = update_user(session, "alice", UserChange(role=Role.OPERATOR))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from modelyard.errors import Conflict, InvalidInput
from modelyard.services.names import commit_new
from modelyard.services.password_hashing import hash_password
from modelyard.services.password_policy import check_new_password
from modelyard.services.roles import Role
from modelyard.services.users import get_user
from modelyard.store.tables import Project, ProjectMember, User, utc_now

USERNAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-@")
MAXIMUM_USERNAME_LENGTH = 64


def user_to_json(session: Session, user: User) -> dict[str, Any]:
    projects = session.scalars(
        select(Project.name)
        .join(ProjectMember, ProjectMember.project_id == Project.id)
        .where(ProjectMember.user_id == user.id)
        .order_by(Project.name)
    ).all()
    return {
        "username": user.username,
        "role": user.role,
        "disabled": user.disabled,
        "projects": list(projects),
        "created_at": user.created_at.isoformat(),
        "password_changed_at": user.password_changed_at.isoformat(),
    }


def check_username(username: str) -> str:
    if not 1 <= len(username) <= MAXIMUM_USERNAME_LENGTH:
        raise InvalidInput(f"a username has 1 to {MAXIMUM_USERNAME_LENGTH} characters; {username!r} does not")
    bad = sorted(set(username) - USERNAME_CHARACTERS)
    if bad:
        raise InvalidInput(
            f"username {username!r} has characters that are not allowed: {', '.join(map(repr, bad))}",
            hint="use letters, digits and . _ - @",
        )
    return username


def list_users(session: Session) -> list[User]:
    return list(session.scalars(select(User).order_by(User.username)))


def create_user(session: Session, username: str, password: str, role: Role) -> User:
    check_username(username)
    check_new_password(password, username=username)
    if session.scalar(select(User.id).where(User.username == username)) is not None:
        raise Conflict(f"a user named {username!r} already exists", hint="choose another username")
    user = User(
        username=username, password_hash=hash_password(password), role=role.value, is_admin=role == Role.ADMIN
    )
    session.add(user)
    commit_new(session, "user", username)
    return user


@dataclass(frozen=True)
class UserChange:
    """What to change (None: leave as it is)."""

    role: Role | None = None
    disabled: bool | None = None
    password: str | None = None


def _enabled_admins(session: Session) -> int:
    return int(
        session.scalar(
            select(func.count())
            .select_from(User)
            .where(User.role == Role.ADMIN.value, User.disabled.is_(False))
        )
        or 0
    )


def _keep_an_admin(session: Session, user: User, what: str) -> None:
    if user.role == Role.ADMIN.value and not user.disabled and _enabled_admins(session) <= 1:
        raise Conflict(
            f"{user.username!r} is the last enabled admin and cannot be {what}",
            hint="make another user admin first",
        )


def update_user(session: Session, username: str, change: UserChange) -> tuple[User, dict[str, Any]]:
    """Apply ``change``; returns the user and what changed (a new password as changed, never its value)."""
    user = get_user(session, username)
    changed: dict[str, Any] = {}
    if change.role is not None and change.role.value != user.role:
        if change.role != Role.ADMIN:
            _keep_an_admin(session, user, f"made {change.role.value}")
        changed["role"] = {"from": user.role, "to": change.role.value}
        user.role = change.role.value
        user.is_admin = change.role == Role.ADMIN
    if change.disabled is not None and change.disabled != user.disabled:
        if change.disabled:
            _keep_an_admin(session, user, "disabled")
        changed["disabled"] = change.disabled
        user.disabled = change.disabled
    if change.password is not None:
        check_new_password(change.password, username=username)
        user.password_hash = hash_password(change.password)
        # Open console sessions remember the old hash: they end.
        user.password_changed_at = utc_now()
        changed["password_reset"] = True
    session.commit()
    return user, changed


def delete_user(session: Session, username: str) -> User:
    user = get_user(session, username)
    _keep_an_admin(session, user, "removed")
    session.delete(user)
    session.commit()
    return user
