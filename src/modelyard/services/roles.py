"""Who may do what: the three roles and the access levels that routes ask for.

A user has one ``Role``. Every REST route and console page asks for one ``Access`` level
(``modelyard.server.policy.ROUTE_ACCESS``, the one table of them); ``may`` says whether a role
has it. What a member sees through the routes open to members is narrowed to the projects the
member belongs to (``modelyard.services.projects``).

- ``admin``: everything, including users, projects, registry credentials and the audit log.
- ``operator``: deploy, scale, stop and remove deployments; models, backends, tasks,
  benchmarks, workers; every project's deployments, keys and usage; the audit log.
- ``member``: the playground, the deployments of their projects, their own keys (made in one of
  their projects), their projects' usage, their own password.

Usage::

    if not may(Role(user.role), Access.OPERATOR):
        raise Forbidden(...)
"""

from __future__ import annotations

from enum import StrEnum

from modelyard.errors import InvalidInput


class Role(StrEnum):
    """A user's role (external API: stored in ``users.role``, sent and shown as these values)."""

    ADMIN = "admin"
    OPERATOR = "operator"
    MEMBER = "member"


class Access(StrEnum):
    """What a route asks of the user (external API: shown in ``docs/security.md``'s matrix)."""

    # No sign-in asked: the sign-in pages, static files, the API's description, and routes with
    # their own credential (/metrics: the scrape token).
    PUBLIC = "public"
    # Every signed-in user; what a member sees is narrowed to the member's projects.
    MEMBER = "member"
    # Operators and admins.
    OPERATOR = "operator"
    # Admins only.
    ADMIN = "admin"


_ROLES_WITH: dict[Access, frozenset[Role]] = {
    Access.PUBLIC: frozenset(Role),
    Access.MEMBER: frozenset(Role),
    Access.OPERATOR: frozenset({Role.ADMIN, Role.OPERATOR}),
    Access.ADMIN: frozenset({Role.ADMIN}),
}


def may(role: Role, access: Access) -> bool:
    """Whether a user of ``role`` may call a route that asks for ``access``."""
    return role in _ROLES_WITH[access]


def roles_with(access: Access) -> list[Role]:
    """The roles that have ``access``, strongest first (for messages and the docs' matrix)."""
    return [role for role in Role if role in _ROLES_WITH[access]]


def parse_role(value: str) -> Role:
    """``value`` as a ``Role``; ``InvalidInput`` naming the roles otherwise."""
    try:
        return Role(value)
    except ValueError:
        raise InvalidInput(
            f"role {value!r} is not one of {', '.join(role.value for role in Role)}",
            hint="admin: everything; operator: deployments, models, backends; member: playground, own keys",
        ) from None


def sees_every_project(role: Role) -> bool:
    """Admins and operators see every project's deployments, keys and usage; members their own."""
    return role in (Role.ADMIN, Role.OPERATOR)
