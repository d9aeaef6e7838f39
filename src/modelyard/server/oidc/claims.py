"""What an ID token's claims make of an account here: its role and its username.

Usage::

    role = role_for_claims({"groups": ["modelyard-admins"]}, settings.roles)   # "admin"
    wanted = projects_for_claims({"groups": ["ml-research"]}, settings.projects)   # {"research"}
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from modelyard.errors import Forbidden
from modelyard.server.oidc.settings import ROLES, ProjectMapping, RoleMapping

MAXIMUM_USERNAME_CHARACTERS = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9._@+-]")


class NoRoleForAccount(Forbidden):
    """The provider signed the account in, but no configured claim value gives it a role here."""

    code = "no_role_for_account"


def claim_values(claims: Mapping[str, Any], claim: str) -> list[str]:
    """The claim as a list of strings (a string, a list of strings; a dotted name reads nested
    objects, e.g. ``realm_access.roles``)."""
    value: Any = claims
    for part in claim.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, str)]
    return []


def role_for_claims(claims: Mapping[str, Any], mapping: RoleMapping) -> str:
    """The role (``admin``, ``operator`` or ``member``) the claims give: the strongest whose values
    include one of the claim's, else ``mapping.default_role``; ``NoRoleForAccount`` when neither."""
    found = set(claim_values(claims, mapping.claim))
    for role in ROLES:
        values = mapping.values.get(role, ())
        if "*" in values or found.intersection(values):
            return role
    if mapping.default_role is not None:
        return mapping.default_role
    shown = ", ".join(sorted(found)) or "none"
    raise NoRoleForAccount(
        f"the provider's account has no role here: its {mapping.claim!r} claim ({shown}) matches no "
        "configured value",
        hint="ask the admin to add one of those values to MODELYARD_OIDC_ADMIN_VALUES, _OPERATOR_VALUES "
        "or _MEMBER_VALUES, or to set MODELYARD_OIDC_DEFAULT_ROLE",
    )


def projects_for_claims(claims: Mapping[str, Any], mapping: ProjectMapping) -> frozenset[str]:
    """The projects (of ``mapping.managed``) the claims make the account a member of."""
    found = set(claim_values(claims, mapping.claim)) | {"*"}
    return frozenset(name for value, names in mapping.projects.items() if value in found for name in names)


def username_for_claims(claims: Mapping[str, Any], claim: str) -> str:
    """The name a provider's account gets here, from ``claim`` (else ``email``, else ``sub``),
    cut to the characters and length a username may have."""
    for name in (claim, "email", "sub"):
        value = claims.get(name)
        if isinstance(value, str) and value.strip():
            return _UNSAFE.sub("_", value.strip())[:MAXIMUM_USERNAME_CHARACTERS]
    return "oidc-user"
