"""The OpenID Connect settings, read once from the environment when the server starts.

- ``MODELYARD_OIDC_ISSUER``: the provider's issuer URL; unset: no single sign-on;
- ``MODELYARD_OIDC_CLIENT_ID``: this server's client id at the provider;
- ``MODELYARD_OIDC_CLIENT_SECRET_FILE`` (a file holding it) or ``MODELYARD_OIDC_CLIENT_SECRET``;
- ``MODELYARD_OIDC_SCOPES``: scopes asked for (default ``openid profile email``);
- ``MODELYARD_OIDC_NAME``: the provider's name on the sign-in button (default: the issuer's host);
- ``MODELYARD_OIDC_REDIRECT_URL``: the callback registered at the provider (default
  ``<this server>/login/oidc/callback``);
- ``MODELYARD_OIDC_USERNAME_CLAIM``: the claim naming the user here (default ``preferred_username``);
- ``MODELYARD_OIDC_ROLE_CLAIM``: the claim read for roles, a string or a list (default ``groups``);
- ``MODELYARD_OIDC_ADMIN_VALUES``, ``_OPERATOR_VALUES``, ``_MEMBER_VALUES``: comma-separated claim
  values giving each role (``*``: any account);
- ``MODELYARD_OIDC_DEFAULT_ROLE``: the role of an account no value matched (default ``none``: refused);
- ``MODELYARD_OIDC_PROJECTS``: comma-separated ``VALUE=PROJECT`` pairs: an account whose project
  claim holds VALUE is a member of PROJECT (``*=PROJECT``: every account), kept in step at each
  sign-in for the projects named here (other memberships are the admin's and stay);
- ``MODELYARD_OIDC_PROJECT_CLAIM``: the claim read for projects (default: the role claim).

The secret is never logged nor shown: ``repr`` hides it.

Usage::

    settings = OidcSettings.from_environment(os.environ)   # None without MODELYARD_OIDC_ISSUER
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from modelyard.errors import InvalidInput

Role = Literal["admin", "operator", "member"]
# Strongest first: an account whose claims match several roles gets the first.
ROLES: tuple[Role, ...] = ("admin", "operator", "member")

ENV_PREFIX = "MODELYARD_OIDC_"


@dataclass(frozen=True)
class RoleMapping:
    """Which claim values give which role: ``values[role]`` (``*`` matches any account)."""

    claim: str = "groups"
    values: Mapping[Role, tuple[str, ...]] = field(default_factory=dict)
    # The role of an account that no value matched; None: such an account is refused.
    default_role: Role | None = None


@dataclass(frozen=True)
class ProjectMapping:
    """Which claim values make an account a member of which projects: ``projects[value]``."""

    claim: str = "groups"
    projects: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def managed(self) -> frozenset[str]:
        """The projects whose membership the provider's claims decide."""
        return frozenset(name for names in self.projects.values() for name in names)


@dataclass(frozen=True)
class OidcSettings:
    issuer: str
    client_id: str
    client_secret: str = field(repr=False)
    scopes: tuple[str, ...] = ("openid", "profile", "email")
    display_name: str = ""
    redirect_url: str | None = None
    username_claim: str = "preferred_username"
    roles: RoleMapping = field(default_factory=RoleMapping)
    projects: ProjectMapping = field(default_factory=ProjectMapping)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> OidcSettings | None:
        def get(name: str) -> str:
            return environ.get(ENV_PREFIX + name, "").strip()

        issuer = get("ISSUER").rstrip("/")
        if not issuer:
            return None
        parts = urlsplit(issuer)
        if parts.scheme not in ("https", "http") or not parts.netloc:
            raise InvalidInput(
                f"{ENV_PREFIX}ISSUER={issuer!r} is not an http(s) URL",
                hint="set it to the provider's issuer, e.g. https://id.example.org/realms/main",
            )
        client_id = get("CLIENT_ID")
        if not client_id:
            raise InvalidInput(
                f"{ENV_PREFIX}ISSUER is set but {ENV_PREFIX}CLIENT_ID is not",
                hint="register modelyard as a client at the provider and set its client id",
            )
        scopes = tuple(get("SCOPES").replace(",", " ").split()) or cls.scopes
        if "openid" not in scopes:
            scopes = ("openid", *scopes)
        default_role = get("DEFAULT_ROLE").lower() or "none"
        if default_role not in (*ROLES, "none"):
            raise InvalidInput(
                f"{ENV_PREFIX}DEFAULT_ROLE={default_role!r} is not a role",
                hint="use admin, operator, member, or none (accounts no value matched are refused)",
            )
        values = {
            role: tuple(value.strip() for value in get(f"{role.upper()}_VALUES").split(",") if value.strip())
            for role in ROLES
        }
        role_claim = get("ROLE_CLAIM") or "groups"
        return cls(
            issuer=issuer,
            client_id=client_id,
            client_secret=_client_secret(environ),
            scopes=scopes,
            display_name=get("NAME") or parts.hostname or issuer,
            redirect_url=get("REDIRECT_URL") or None,
            username_claim=get("USERNAME_CLAIM") or cls.username_claim,
            projects=ProjectMapping(
                claim=get("PROJECT_CLAIM") or role_claim, projects=_project_pairs(get("PROJECTS"))
            ),
            roles=RoleMapping(
                claim=role_claim,
                values={role: found for role, found in values.items() if found},
                default_role=None if default_role == "none" else default_role,  # type: ignore[arg-type]
            ),
        )


def _project_pairs(text: str) -> dict[str, tuple[str, ...]]:
    """``MODELYARD_OIDC_PROJECTS``'s ``VALUE=PROJECT`` pairs, as claim value -> project names."""
    pairs: dict[str, tuple[str, ...]] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        value, equals, project = (piece.strip() for piece in entry.partition("="))
        if not equals or not value or not project:
            raise InvalidInput(
                f"{ENV_PREFIX}PROJECTS has {entry!r}, which is not VALUE=PROJECT",
                hint=f"write claim values and project names in pairs, e.g. {ENV_PREFIX}PROJECTS="
                "ml-research=research,ml-ops=operations (*=PROJECT: every account)",
            )
        pairs[value] = (*pairs.get(value, ()), project)
    return pairs


def _client_secret(environ: Mapping[str, str]) -> str:
    secret = environ.get(ENV_PREFIX + "CLIENT_SECRET", "").strip()
    path_text = environ.get(ENV_PREFIX + "CLIENT_SECRET_FILE", "").strip()
    if secret and path_text:
        raise InvalidInput(
            f"both {ENV_PREFIX}CLIENT_SECRET and {ENV_PREFIX}CLIENT_SECRET_FILE are set",
            hint="set only one (the file keeps the secret out of the process list and environment)",
        )
    if path_text:
        path = Path(path_text).expanduser()
        try:
            secret = path.read_text(encoding="utf-8").strip()
        except OSError as error:
            raise InvalidInput(
                f"{ENV_PREFIX}CLIENT_SECRET_FILE={path} cannot be read: {error.strerror}",
                hint="point it at a file (mode 0600) that holds the client secret",
            ) from None
        if not secret:
            raise InvalidInput(
                f"{ENV_PREFIX}CLIENT_SECRET_FILE={path} is empty", hint="write the client secret into it"
            )
    if not secret:
        raise InvalidInput(
            f"{ENV_PREFIX}ISSUER is set but the client secret is not",
            hint=f"set {ENV_PREFIX}CLIENT_SECRET_FILE to a file holding it, or {ENV_PREFIX}CLIENT_SECRET",
        )
    return secret
