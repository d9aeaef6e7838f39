"""Projects: a project owns deployments and API keys; its members see them, and its quotas hold
for all of its keys together (``server/gateway/project_limits.py``).

The project ``default`` exists from the start (revision 0013 put every older deployment and key
in it) and cannot be removed. Admins and operators see every project; a member sees the projects
they belong to (``visible_project_ids``).

Usage::

    project = create_project(session, "research", ProjectQuotas(tokens_per_day=1_000_000))
    add_member(session, "research", "alice")
    ids = visible_project_ids(session, user_id, Role.MEMBER)   # None: every project
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from modelyard.errors import Conflict, InvalidInput, NotFound
from modelyard.services.names import check_name, commit_new
from modelyard.services.roles import Role, sees_every_project
from modelyard.store.tables import DEFAULT_PROJECT, ApiKey, Deployment, Project, ProjectMember, User


@dataclass(frozen=True)
class ProjectQuotas:
    """A project's limits, for all its keys together (None: none of that kind)."""

    tokens_per_day: int | None = None
    tokens_per_month: int | None = None
    max_concurrent_requests: int | None = None


def project_to_json(session: Session, project: Project) -> dict[str, Any]:
    members = session.scalars(
        select(User.username)
        .join(ProjectMember, ProjectMember.user_id == User.id)
        .where(ProjectMember.project_id == project.id)
        .order_by(User.username)
    ).all()
    counts = {
        what: session.scalar(select(func.count()).select_from(table).where(table.project_id == project.id))
        for what, table in (("deployments", Deployment), ("keys", ApiKey))
    }
    return {
        "name": project.name,
        "description": project.description,
        "members": list(members),
        "deployments": counts["deployments"],
        "keys": counts["keys"],
        "quotas": {
            "tokens_per_day": project.tokens_per_day,
            "tokens_per_month": project.tokens_per_month,
            "max_concurrent_requests": project.max_concurrent_requests,
        },
        "created_at": project.created_at.isoformat(),
    }


def list_projects(session: Session, visible: set[int] | None = None) -> list[Project]:
    statement = select(Project).order_by(Project.name)
    if visible is not None:
        statement = statement.where(Project.id.in_(visible))
    return list(session.scalars(statement))


def get_project(session: Session, name: str, visible: set[int] | None = None) -> Project:
    """The project ``name``; ``NotFound`` also when it is not among ``visible`` (a member's)."""
    project = session.scalar(select(Project).where(Project.name == name))
    if project is None or (visible is not None and project.id not in visible):
        known = [shown.name for shown in list_projects(session, visible)]
        raise NotFound(f"no project named {name!r}", hint=f"projects: {', '.join(known) or 'none'}")
    return project


def create_project(session: Session, name: str, quotas: ProjectQuotas, description: str = "") -> Project:
    check_name(name, "project")
    if "/" in name:
        raise InvalidInput(f"the project name {name!r} has a '/'", hint="use letters, digits and - _ . :")
    if session.scalar(select(Project.id).where(Project.name == name)) is not None:
        raise Conflict(f"a project named {name!r} already exists", hint="choose another name")
    project = Project(
        name=name,
        description=description,
        tokens_per_day=quotas.tokens_per_day,
        tokens_per_month=quotas.tokens_per_month,
        max_concurrent_requests=quotas.max_concurrent_requests,
    )
    session.add(project)
    commit_new(session, "project", name)
    return project


def update_project(
    session: Session, name: str, quotas: ProjectQuotas | None, description: str | None
) -> tuple[Project, dict[str, Any]]:
    """Set the project's quotas (all three, None lifting one) and description; returns what changed."""
    project = get_project(session, name)
    changed: dict[str, Any] = {}
    if quotas is not None:
        for field in ("tokens_per_day", "tokens_per_month", "max_concurrent_requests"):
            value = getattr(quotas, field)
            if getattr(project, field) != value:
                changed[field] = value
                setattr(project, field, value)
    if description is not None and description != project.description:
        changed["description"] = description
        project.description = description
    session.commit()
    return project, changed


def delete_project(session: Session, name: str) -> Project:
    """Remove an empty project (not ``default``); ``Conflict`` naming what it still owns."""
    project = get_project(session, name)
    if project.name == DEFAULT_PROJECT:
        raise Conflict(
            f"project {DEFAULT_PROJECT!r} cannot be removed", hint="it holds what has no other project"
        )
    owned = [
        f"{count} {what}"
        for what, table in (("deployments", Deployment), ("keys", ApiKey))
        if (
            count := session.scalar(
                select(func.count()).select_from(table).where(table.project_id == project.id)
            )
        )
    ]
    if owned:
        raise Conflict(
            f"project {name!r} still owns {' and '.join(owned)}",
            hint="remove them (or their keys) first; nothing is moved or deleted with a project",
        )
    session.delete(project)
    session.commit()
    return project


def _user(session: Session, username: str) -> User:
    user = session.scalar(select(User).where(User.username == username))
    if user is None:
        raise NotFound(f"no user named {username!r}", hint="see GET /api/v1/users (modelyard users list)")
    return user


def add_member(session: Session, name: str, username: str) -> bool:
    """Put ``username`` in project ``name``; False when they were in it already."""
    project = get_project(session, name)
    user = _user(session, username)
    present = session.scalar(
        select(ProjectMember.id).where(
            ProjectMember.project_id == project.id, ProjectMember.user_id == user.id
        )
    )
    if present is not None:
        return False
    session.add(ProjectMember(project_id=project.id, user_id=user.id))
    session.commit()
    return True


def remove_member(session: Session, name: str, username: str) -> bool:
    """Take ``username`` out of project ``name``; False when they were not in it."""
    project = get_project(session, name)
    user = _user(session, username)
    membership = session.scalar(
        select(ProjectMember).where(ProjectMember.project_id == project.id, ProjectMember.user_id == user.id)
    )
    if membership is None:
        return False
    session.delete(membership)
    session.commit()
    return True


def visible_project_ids(session: Session, user_id: int, role: Role) -> set[int] | None:
    """The ids of the projects the user sees: None (every one) for admins and operators."""
    if sees_every_project(role):
        return None
    return set(session.scalars(select(ProjectMember.project_id).where(ProjectMember.user_id == user_id)))


def project_names(session: Session) -> dict[int, str]:
    """Every project's name by id (to show next to deployments and keys)."""
    return {project_id: name for project_id, name in session.execute(select(Project.id, Project.name))}


def project_for_new_object(session: Session, name: str | None, visible: set[int] | None) -> Project:
    """The project a new key or deployment goes into: ``name``, else ``default`` for someone who
    sees every project, else the member's only project. ``InvalidInput`` when a member of several
    projects names none, ``NotFound`` for a project the user cannot see."""
    if name is not None:
        return get_project(session, name, visible)
    if visible is None:
        return get_project(session, DEFAULT_PROJECT)
    mine = list_projects(session, visible)
    if len(mine) == 1:
        return mine[0]
    if not mine:
        raise InvalidInput(
            "you belong to no project, so you cannot make keys",
            hint="ask an admin to add you to a project (modelyard projects add-member PROJECT USER)",
        )
    raise InvalidInput(
        f"you belong to {len(mine)} projects: say which one with 'project'",
        hint=f"projects: {', '.join(project.name for project in mine)}",
    )
