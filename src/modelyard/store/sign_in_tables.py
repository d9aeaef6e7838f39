"""The tables of signing in: console sessions, and the accounts of an OpenID Connect provider.

Kept apart from ``tables.py`` (same ``Base``, same Alembic history: revision ``0014_db_sessions``).

- ``console_sessions``: one row per signed-in browser. Only the SHA-256 of the session token is
  stored (the cookie holds the token), so a copy of the database opens no session.
- ``external_identities``: which local user an OpenID Connect account (issuer + ``sub``) is,
  made at its first sign-in.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from modelyard.store.tables import Base, UtcDateTime, utc_now


class ConsoleSessionRow(Base):
    __tablename__ = "console_sessions"

    id: Mapped[int] = mapped_column(primary_key=True)
    # SHA-256 (hex) of the cookie's token; the token itself is never stored.
    token_digest: Mapped[str] = mapped_column(String(64), unique=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    # Sent back by every write made with the session (it is shown in the pages: not a credential alone).
    csrf_token: Mapped[str] = mapped_column(String(64))
    # SHA-256 of the user's password hash when the session opened: a password change ends it.
    password_digest: Mapped[str] = mapped_column(String(64))
    # How the user signed in: "password" or "oidc".
    method: Mapped[str] = mapped_column(String(16))
    client_address: Mapped[str | None] = mapped_column(String(64), nullable=True)
    opened_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now, index=True)
    last_seen_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now, index=True)


class ExternalIdentity(Base):
    __tablename__ = "external_identities"
    __table_args__ = (UniqueConstraint("issuer", "subject", name="uq_external_identities_issuer_subject"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    issuer: Mapped[str] = mapped_column(String(512))
    subject: Mapped[str] = mapped_column(String(255))
    # The role the claims mapped to at the last sign-in (admin, operator or member).
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now)
    last_sign_in_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now)
