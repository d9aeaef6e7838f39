"""The local user of a provider's account: found by (issuer, ``sub``), made at its first sign-in.

A provider's account is never joined to an existing local account by name (that would let
whoever names themselves ``admin`` at the provider take the admin's account): a name already
taken gets a suffix (``alice-2``). The account has no usable password (its hash is not scrypt's,
so no password matches it); its role (``users.role``: admin, operator or member, what
``server/policy.py`` decides by) is the claims' at each sign-in, so a change at the provider
holds from the account's next sign-in. So do its projects where ``MODELYARD_OIDC_PROJECTS`` maps
claim values to projects: at each sign-in the account joins the mapped projects its claims give and
leaves the mapped ones they no longer give (``sync_projects``); a project the mapping does not
name keeps the memberships an admin gave, and a mapped project that does not exist is skipped
and named in the log. A disabled account is refused. The user made, a role changed, a project
joined or left and the sign-in are recorded in the audit log in the transaction that makes them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelyard.errors import Forbidden
from modelyard.services import audit
from modelyard.services.roles import Role
from modelyard.store.sign_in_tables import ExternalIdentity
from modelyard.store.tables import Project, ProjectMember, User, utc_now

logger = logging.getLogger(__name__)

# Not a scrypt hash: verify_password refuses every password against it.
NO_PASSWORD_HASH = "!signed-in-through-oidc"


@dataclass(frozen=True)
class SignedInAccount:
    user_id: int
    username: str
    password_hash: str
    role: str
    created: bool
    # The projects the claims made it join and leave at this sign-in.
    joined: tuple[str, ...] = field(default=())
    left: tuple[str, ...] = field(default=())


def _free_username(session: Session, wanted: str) -> str:
    candidate, number = wanted, 1
    while session.scalar(select(User.id).where(User.username == candidate)) is not None:
        number += 1
        suffix = f"-{number}"
        candidate = wanted[: 64 - len(suffix)] + suffix
    return candidate


class AccountDisabled(Forbidden):
    """The provider signed in an account whose local user an admin disabled."""

    code = "account_disabled"


def sync_projects(
    session: Session, user: User, wanted: frozenset[str], managed: frozenset[str], issuer: str
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Make ``user`` a member of exactly the ``wanted`` projects among the ``managed`` ones (the
    others untouched), auditing each join and leave; the projects joined and left."""
    if not managed:
        return (), ()
    found = session.scalars(select(Project).where(Project.name.in_(managed)))
    projects = {project.name: project for project in found}
    missing = sorted(managed - set(projects))
    if missing:
        logger.warning(
            "MODELYARD_OIDC_PROJECTS names projects that do not exist: %s (create them with "
            "`modelyard projects create NAME`)",
            ", ".join(missing),
        )
    memberships = {
        membership.project_id: membership
        for membership in session.scalars(select(ProjectMember).where(ProjectMember.user_id == user.id))
    }
    joined: list[str] = []
    left: list[str] = []
    for name, project in sorted(projects.items()):
        member = project.id in memberships
        if name in wanted and not member:
            session.add(ProjectMember(project_id=project.id, user_id=user.id))
            joined.append(name)
        elif name not in wanted and member:
            session.delete(memberships[project.id])
            left.append(name)
    for action, names in (("join", joined), ("leave", left)):
        for name in names:
            audit.record(
                session,
                actor=user.username,
                action=action,
                object_type="project",
                object_name=name,
                project=name,
                details={"member": user.username, "by": "the provider's claims", "issuer": issuer},
            )
    return tuple(joined), tuple(left)


def account_for(
    session: Session,
    *,
    issuer: str,
    subject: str,
    username: str,
    role: Role,
    address: str | None = None,
    projects: frozenset[str] = frozenset(),
    managed_projects: frozenset[str] = frozenset(),
) -> SignedInAccount:
    """The user of ``issuer``/``subject``, made now when it signs in for the first time; its
    role and its memberships of ``managed_projects`` (``projects`` of them) set from this sign-in's
    claims. ``AccountDisabled`` for a disabled user (nothing
    changed). Commits, with the audit rows of what it did."""
    identity = session.scalar(
        select(ExternalIdentity).where(ExternalIdentity.issuer == issuer, ExternalIdentity.subject == subject)
    )
    created = identity is None
    if identity is None:
        user = User(username=_free_username(session, username), password_hash=NO_PASSWORD_HASH)
        session.add(user)
        session.flush()
        identity = ExternalIdentity(user_id=user.id, issuer=issuer, subject=subject, role=role)
        session.add(identity)
    else:
        found = session.get(User, identity.user_id)
        assert found is not None, "external_identities.user_id cascades on delete"
        user = found
        if user.disabled:
            raise AccountDisabled(
                f"user {user.username!r} is disabled here, though the provider signed it in",
                hint="ask an admin to enable the account (modelyard users update NAME --enable)",
            )
    previous = None if created else user.role
    user.role = role.value
    user.is_admin = role == Role.ADMIN
    identity.role = role.value
    identity.last_sign_in_at = utc_now()
    if created:
        audit.record(
            session,
            actor=user.username,
            action="create",
            object_type="user",
            object_name=user.username,
            details={"role": role.value, "method": "oidc", "issuer": issuer},
        )
    elif previous != role.value:
        audit.record(
            session,
            actor=user.username,
            action="role",
            object_type="user",
            object_name=user.username,
            details={"from": previous, "to": role.value, "by": "the provider's claims", "issuer": issuer},
        )
    joined, left = sync_projects(session, user, projects, managed_projects, issuer)
    audit.record(
        session,
        actor=user.username,
        action="login",
        object_type="session",
        object_name=user.username,
        details={"method": "oidc", "address": address},
    )
    session.commit()
    return SignedInAccount(user.id, user.username, user.password_hash, role.value, created, joined, left)
