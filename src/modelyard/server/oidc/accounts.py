"""The local user of a provider's account: found by (issuer, ``sub``), made at its first sign-in.

A provider's account is never joined to an existing local account by name (that would let
whoever names themselves ``admin`` at the provider take the admin's account): a name already
taken gets a suffix (``alice-2``). The account has no usable password (its hash is not scrypt's,
so no password matches it); its role (``users.role``: admin, operator or member, what
``server/policy.py`` decides by) is the claims' at each sign-in, so a change at the provider
holds from the account's next sign-in. A disabled account is refused. The user made, a role
changed and the sign-in are recorded in the audit log in the transaction that makes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelyard.errors import Forbidden
from modelyard.services import audit
from modelyard.services.roles import Role
from modelyard.store.sign_in_tables import ExternalIdentity
from modelyard.store.tables import User, utc_now

# Not a scrypt hash: verify_password refuses every password against it.
NO_PASSWORD_HASH = "!signed-in-through-oidc"


@dataclass(frozen=True)
class SignedInAccount:
    user_id: int
    username: str
    password_hash: str
    role: str
    created: bool


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


def account_for(
    session: Session, *, issuer: str, subject: str, username: str, role: Role, address: str | None = None
) -> SignedInAccount:
    """The user of ``issuer``/``subject``, made now when it signs in for the first time; its
    role set from this sign-in's claims. ``AccountDisabled`` for a disabled user (nothing
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
    audit.record(
        session,
        actor=user.username,
        action="login",
        object_type="session",
        object_name=user.username,
        details={"method": "oidc", "address": address},
    )
    session.commit()
    return SignedInAccount(user.id, user.username, user.password_hash, role.value, created)
