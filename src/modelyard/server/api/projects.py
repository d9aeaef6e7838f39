"""``/api/v1/projects``: projects, their quotas and members. Admins change them; a member reads
the projects they belong to (``server/policy.py``). Every change is in the audit log."""

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
from modelyard.services import projects

router = APIRouter(tags=["projects"])

MAXIMUM_TOKENS = 10**15


class ProjectQuotasBody(BaseModel):
    """Limits for every key of the project together (absent or null: none of that kind)."""

    model_config = ConfigDict(extra="forbid")

    tokens_per_day: int | None = Field(default=None, ge=1, le=MAXIMUM_TOKENS)
    tokens_per_month: int | None = Field(default=None, ge=1, le=MAXIMUM_TOKENS)
    max_concurrent_requests: int | None = Field(default=None, ge=1, le=100_000)

    def quotas(self) -> projects.ProjectQuotas:
        return projects.ProjectQuotas(**self.model_dump())


class ProjectCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64)
    description: str = Field(default="", max_length=1000)
    quotas: ProjectQuotasBody = Field(default_factory=ProjectQuotasBody)


class ProjectUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    description: str | None = Field(default=None, max_length=1000)
    # Replaces the quotas whole ({} lifts them all).
    quotas: ProjectQuotasBody | None = None


def _list(session: Session, user: SignedIn) -> list[dict[str, Any]]:
    visible = projects.visible_project_ids(session, user.id, user.role)
    return [
        projects.project_to_json(session, project) for project in projects.list_projects(session, visible)
    ]


def _show(session: Session, name: str, user: SignedIn) -> dict[str, Any]:
    visible = projects.visible_project_ids(session, user.id, user.role)
    return projects.project_to_json(session, projects.get_project(session, name, visible))


def _create(session: Session, body: ProjectCreate) -> dict[str, Any]:
    project = projects.create_project(session, body.name, body.quotas.quotas(), body.description)
    return projects.project_to_json(session, project)


def _update(session: Session, name: str, body: ProjectUpdate) -> tuple[dict[str, Any], dict[str, Any]]:
    quotas = body.quotas.quotas() if body.quotas is not None else None
    project, changed = projects.update_project(session, name, quotas, body.description)
    return projects.project_to_json(session, project), changed


@router.get("/projects")
async def list_projects(
    context: ServerContext = Depends(server_context), user: SignedIn = Depends(authorize)
) -> list[dict[str, Any]]:
    return await in_session(context, _list, user)


@router.get("/projects/{name}")
async def show_project(
    name: str, context: ServerContext = Depends(server_context), user: SignedIn = Depends(authorize)
) -> dict[str, Any]:
    return await in_session(context, _show, name, user)


@router.post("/projects", status_code=201)
async def create_project(
    body: ProjectCreate, context: ServerContext = Depends(server_context), user: SignedIn = Depends(authorize)
) -> dict[str, Any]:
    return await in_audited_session(
        context,
        user,
        _create,
        body,
        audit_entries=lambda created: [
            AuditEntry("create", "project", body.name, body.name, {"quotas": created["quotas"]})
        ],
        drops_key_cache=True,
    )


@router.patch("/projects/{name}")
async def update_project(
    name: str,
    body: ProjectUpdate,
    context: ServerContext = Depends(server_context),
    user: SignedIn = Depends(authorize),
) -> dict[str, Any]:
    shown, _changed = await in_audited_session(
        context,
        user,
        _update,
        name,
        body,
        audit_entries=lambda updated: (
            [AuditEntry("update", "project", name, name, updated[1])] if updated[1] else []
        ),
        # The gateway reads a project's quotas with its keys.
        drops_key_cache=True,
    )
    return shown


@router.delete("/projects/{name}", status_code=204)
async def delete_project(
    name: str, context: ServerContext = Depends(server_context), user: SignedIn = Depends(authorize)
) -> Response:
    await in_audited_session(
        context,
        user,
        projects.delete_project,
        name,
        audit_entries=AuditEntry("delete", "project", name, name),
        drops_key_cache=True,
    )
    return Response(status_code=204)


@router.put("/projects/{name}/members/{username}")
async def add_member(
    name: str,
    username: str,
    context: ServerContext = Depends(server_context),
    user: SignedIn = Depends(authorize),
) -> dict[str, Any]:
    await in_audited_session(
        context,
        user,
        projects.add_member,
        name,
        username,
        audit_entries=lambda added: (
            [AuditEntry("join", "project", name, name, {"member": username})] if added else []
        ),
        # A member's playground key reaches their projects' deployments (``KeyFacts.reaches``).
        drops_key_cache=True,
    )
    return await in_session(context, _show, name, user)


@router.delete("/projects/{name}/members/{username}")
async def remove_member(
    name: str,
    username: str,
    context: ServerContext = Depends(server_context),
    user: SignedIn = Depends(authorize),
) -> dict[str, Any]:
    await in_audited_session(
        context,
        user,
        projects.remove_member,
        name,
        username,
        audit_entries=lambda removed: (
            [AuditEntry("leave", "project", name, name, {"member": username})] if removed else []
        ),
        drops_key_cache=True,
    )
    return await in_session(context, _show, name, user)
