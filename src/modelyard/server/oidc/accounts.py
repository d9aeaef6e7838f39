"""The local user of a provider's account: found by (issuer, ``sub``), made at its first sign-in.

A provider's account is never joined to an existing local account by name (that would let
whoever names themselves ``admin`` at the provider take the admin's account): a name already
taken gets a suffix (``alice-2``). The account has no usable password (its hash is not scrypt's,
so no password matches it); its role is the claims' at each sign-in.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

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


def account_for(session: Session, *, issuer: str, subject: str, username: str, role: str) -> SignedInAccount:
    """The user of ``issuer``/``subject``, made now when it signs in for the first time; its
    role (and whether it is an administrator) set from this sign-in's claims. Commits."""
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
    user.role = role
    user.is_admin = role == "admin"
    identity.role = role
    identity.last_sign_in_at = utc_now()
    session.commit()
    return SignedInAccount(user.id, user.username, user.password_hash, role, created)
