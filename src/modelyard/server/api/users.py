"""``/api/v1/users``: accounts and their roles (admins only, ``server/policy.py``), and
``/users/me`` for whoever is signed in. Every change is recorded in the audit log; a password
never is."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from modelyard.server.api.auditing import AuditEntry, in_audited_session
from modelyard.server.api.common import in_session
from modelyard.server.auth import SignedIn
from modelyard.server.context import ServerContext, server_context
from modelyard.server.policy import authorize
from modelyard.services import user_admin
from modelyard.services.password_hashing import MAXIMUM_PASSWORD_CHARACTERS
from modelyard.services.roles import Role
from modelyard.services.users import get_user

router = APIRouter(tags=["users"])


class UserCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    username: str = Field(min_length=1, max_length=user_admin.MAXIMUM_USERNAME_LENGTH)
    password: str = Field(max_length=MAXIMUM_PASSWORD_CHARACTERS)
    role: Role = Role.MEMBER


class UserUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Role | None = None
    disabled: bool | None = None
    # A new password set by an admin (the user's console sessions end).
    password: str | None = Field(default=None, max_length=MAXIMUM_PASSWORD_CHARACTERS)


def _list(session: Session) -> list[dict[str, Any]]:
    return [user_admin.user_to_json(session, user) for user in user_admin.list_users(session)]


def _create(session: Session, body: UserCreate) -> dict[str, Any]:
    return user_admin.user_to_json(
        session, user_admin.create_user(session, body.username, body.password, body.role)
    )


def _update(session: Session, username: str, body: UserUpdate) -> tuple[dict[str, Any], dict[str, Any]]:
    change = user_admin.UserChange(role=body.role, disabled=body.disabled, password=body.password)
    user, changed = user_admin.update_user(session, username, change)
    return user_admin.user_to_json(session, user), changed


def _me(session: Session, username: str) -> dict[str, Any]:
    return user_admin.user_to_json(session, get_user(session, username))


@router.get("/users")
async def list_users(context: ServerContext = Depends(server_context)) -> list[dict[str, Any]]:
    return await in_session(context, _list)


@router.get("/users/me")
async def show_me(
    context: ServerContext = Depends(server_context), user: SignedIn = Depends(authorize)
) -> dict[str, Any]:
    """The signed-in user: name, role and projects (what the console and CLI show)."""
    return await in_session(context, _me, user.username)


@router.post("/users", status_code=201)
async def create_user(
    body: UserCreate, context: ServerContext = Depends(server_context), user: SignedIn = Depends(authorize)
) -> dict[str, Any]:
    return await in_audited_session(
        context,
        user,
        _create,
        body,
        audit_entries=AuditEntry("create", "user", body.username, None, {"role": body.role.value}),
    )


@router.patch("/users/{username}")
async def update_user(
    username: str,
    body: UserUpdate,
    context: ServerContext = Depends(server_context),
    user: SignedIn = Depends(authorize),
) -> dict[str, Any]:
    shown, _changed = await in_audited_session(
        context,
        user,
        _update,
        username,
        body,
        audit_entries=lambda updated: _user_entries(username, updated[1]),
    )
    return shown


def _user_entries(username: str, changed: dict[str, Any]) -> list[AuditEntry]:
    """A role change is its own row (``role``); the rest of a change one ``update`` row."""
    entries = [AuditEntry("role", "user", username, None, changed["role"])] if "role" in changed else []
    rest = {name: value for name, value in changed.items() if name != "role"}
    if rest:
        entries.append(AuditEntry("update", "user", username, None, rest))
    return entries


@router.delete("/users/{username}", status_code=204)
async def delete_user(
    username: str, context: ServerContext = Depends(server_context), user: SignedIn = Depends(authorize)
) -> Response:
    await in_audited_session(
        context,
        user,
        user_admin.delete_user,
        username,
        audit_entries=AuditEntry("delete", "user", username),
    )
    return Response(status_code=204)
