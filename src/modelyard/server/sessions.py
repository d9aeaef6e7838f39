"""Console sign-in: sessions in the database behind an HttpOnly cookie, and a CSRF token per session.

The console signs in with a password (``modelyard.server.auth.authenticate``, so any throttling
there applies) or through an OpenID Connect provider (``server/oidc/``), and gets a random
session token in the ``modelyard_session`` cookie (HttpOnly, SameSite=Strict, Path=/). The
session is a row of ``console_sessions`` (``store/sign_in_tables.py``) holding only the SHA-256
of the token: it survives a server restart, every gateway worker's relayed request finds it,
and an admin can end it (``DELETE /api/v1/sessions/{id}``, or all of a user's). Each session has
its own CSRF token, put into every console page (``<meta name="csrf-token">``); every write
(POST, PUT, PATCH, DELETE) made with the session, a form post as well as a fetch of the REST
API, must send it back (``X-CSRF-Token`` header, or the ``csrf_token`` form field), else it is
refused with 403.

A session ends on sign-out (its row is deleted), when revoked, after ``idle_seconds`` without a
request, after ``lifetime_seconds`` (``session_options.py``), or when the user's password
changes (the session remembers a digest of the password hash it was opened with).

Usage::

    store = SessionStore(database)
    token, session = store.open(user_id=1, username="admin", password_hash=user.password_hash)
    response.set_cookie(SESSION_COOKIE, token, **cookie_options(request))
    session = current_session(request, context)   # None without a cookie; raises when stale
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from fastapi import Request
from sqlalchemy import delete, or_, select, update

from modelyard.errors import Forbidden, Unauthorized
from modelyard.server.context import ServerContext
from modelyard.server.session_options import SessionOptions
from modelyard.store.database import Database
from modelyard.store.sign_in_tables import ConsoleSessionRow
from modelyard.store.tables import User

SESSION_COOKIE = "modelyard_session"
CSRF_HEADER = "X-CSRF-Token"
CSRF_FORM_FIELD = "csrf_token"
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

SignInMethod = Literal["password", "oidc"]


class SessionExpired(Unauthorized):
    """The console's session cookie is unknown, expired, revoked or from before a password change.

    Answered without a ``WWW-Authenticate`` challenge, so a browser shows no Basic dialog.
    """

    code = "session_expired"


class CsrfRefused(Forbidden):
    code = "csrf_refused"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class ConsoleSession:
    id: int
    user_id: int
    username: str
    csrf_token: str
    password_digest: str
    method: str
    client_address: str | None
    opened_at: datetime
    last_seen_at: datetime

    def to_json(self) -> dict[str, Any]:
        """What the REST API shows of a session (never its token or CSRF token)."""
        return {
            "id": self.id,
            "username": self.username,
            "method": self.method,
            "client_address": self.client_address,
            "opened_at": self.opened_at.isoformat(),
            "last_seen_at": self.last_seen_at.isoformat(),
        }


def _session_of(row: ConsoleSessionRow, username: str) -> ConsoleSession:
    return ConsoleSession(
        id=row.id,
        user_id=row.user_id,
        username=username,
        csrf_token=row.csrf_token,
        password_digest=row.password_digest,
        method=row.method,
        client_address=row.client_address,
        opened_at=row.opened_at,
        last_seen_at=row.last_seen_at,
    )


@dataclass
class SessionStore:
    """Sessions in ``console_sessions``, by token digest (the token itself is never kept).

    Every method is one short transaction (blocking: call it in a thread from async code);
    ``clock`` is the wall clock (seconds since the epoch), passed in by tests.
    """

    database: Database
    options: SessionOptions = field(default_factory=SessionOptions)
    clock: Callable[[], float] = time.time

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    def _live(self, now: datetime) -> Any:
        """The SQL condition of a session that has not expired at ``now``."""
        return (ConsoleSessionRow.last_seen_at > now - timedelta(seconds=self.options.idle_seconds)) & (
            ConsoleSessionRow.opened_at > now - timedelta(seconds=self.options.lifetime_seconds)
        )

    def open(
        self,
        *,
        user_id: int,
        username: str,
        password_hash: str,
        method: SignInMethod = "password",
        client_address: str | None = None,
    ) -> tuple[str, ConsoleSession]:
        """A new session for the user: its token (for the cookie) and the session."""
        token = secrets.token_urlsafe(32)
        now = self._now()
        row = ConsoleSessionRow(
            token_digest=_digest(token),
            user_id=user_id,
            csrf_token=secrets.token_urlsafe(32),
            password_digest=_digest(password_hash),
            method=method,
            client_address=client_address[:64] if client_address else None,
            opened_at=now,
            last_seen_at=now,
        )
        with self.database.session() as session:
            session.execute(delete(ConsoleSessionRow).where(~self._live(now)))
            held = list(
                session.scalars(
                    select(ConsoleSessionRow.id)
                    .where(ConsoleSessionRow.user_id == user_id)
                    .order_by(ConsoleSessionRow.last_seen_at.desc(), ConsoleSessionRow.id.desc())
                    .offset(self.options.maximum_per_user - 1)
                )
            )
            if held:
                session.execute(delete(ConsoleSessionRow).where(ConsoleSessionRow.id.in_(held)))
            session.add(row)
            session.commit()
            return token, _session_of(row, username)

    def find(self, token: str) -> ConsoleSession | None:
        """The live session of ``token`` (its idle clock restarted), or None: unknown, expired,
        revoked, or opened before the user's password changed (then it is deleted)."""
        now = self._now()
        with self.database.session() as session:
            found = session.execute(
                select(ConsoleSessionRow, User.username, User.password_hash)
                .join(User, User.id == ConsoleSessionRow.user_id)
                .where(ConsoleSessionRow.token_digest == _digest(token))
            ).first()
            if found is None:
                return None
            row, username, password_hash = found
            expired = now - row.last_seen_at > timedelta(
                seconds=self.options.idle_seconds
            ) or now - row.opened_at > timedelta(seconds=self.options.lifetime_seconds)
            stale = not hmac.compare_digest(_digest(password_hash), row.password_digest)
            if expired or stale:
                session.execute(delete(ConsoleSessionRow).where(ConsoleSessionRow.id == row.id))
                session.commit()
                return None
            if now - row.last_seen_at > timedelta(seconds=self.options.touch_interval_seconds):
                session.execute(
                    update(ConsoleSessionRow).where(ConsoleSessionRow.id == row.id).values(last_seen_at=now)
                )
                session.commit()
                row.last_seen_at = now
            return _session_of(row, username)

    def close(self, token: str) -> None:
        """Sign-out: the session's row is deleted."""
        with self.database.session() as session:
            session.execute(delete(ConsoleSessionRow).where(ConsoleSessionRow.token_digest == _digest(token)))
            session.commit()

    def live_sessions(self, user_id: int | None = None) -> list[ConsoleSession]:
        """The sessions that have not expired, most recently used first (one user's, or all)."""
        now = self._now()
        query = (
            select(ConsoleSessionRow, User.username)
            .join(User, User.id == ConsoleSessionRow.user_id)
            .where(self._live(now))
            .order_by(ConsoleSessionRow.last_seen_at.desc(), ConsoleSessionRow.id.desc())
        )
        if user_id is not None:
            query = query.where(ConsoleSessionRow.user_id == user_id)
        with self.database.session() as session:
            return [_session_of(row, username) for row, username in session.execute(query)]

    def revoke(self, session_id: int) -> bool:
        """End one session (False: there is none by that id)."""
        with self.database.session() as session:
            deleted = session.execute(delete(ConsoleSessionRow).where(ConsoleSessionRow.id == session_id))
            session.commit()
            return bool(getattr(deleted, "rowcount", 0))

    def revoke_user(self, user_id: int) -> int:
        """End every session of a user; how many were live."""
        now = self._now()
        with self.database.session() as session:
            live = len(
                list(
                    session.scalars(
                        select(ConsoleSessionRow.id).where(
                            (ConsoleSessionRow.user_id == user_id) & self._live(now)
                        )
                    )
                )
            )
            session.execute(delete(ConsoleSessionRow).where(ConsoleSessionRow.user_id == user_id))
            session.commit()
            return live

    def drop_expired(self) -> int:
        """Delete the rows of expired sessions (done at each sign-in too); how many."""
        now = self._now()
        with self.database.session() as session:
            deleted = session.execute(
                delete(ConsoleSessionRow).where(
                    or_(
                        ConsoleSessionRow.last_seen_at <= now - timedelta(seconds=self.options.idle_seconds),
                        ConsoleSessionRow.opened_at <= now - timedelta(seconds=self.options.lifetime_seconds),
                    )
                )
            )
            session.commit()
            return int(getattr(deleted, "rowcount", 0) or 0)


def session_store(request: Request) -> SessionStore | None:
    """The app's store (``app.state.console_sessions``); None in an app without the console."""
    store = getattr(request.app.state, "console_sessions", None)
    return store if isinstance(store, SessionStore) else None


def store_of(request: Request, context: ServerContext) -> SessionStore:
    """The console's store (its lifetimes), or, in an app without the console, one on the same table."""
    return session_store(request) or SessionStore(context.database)


def cookie_options(request: Request) -> dict[str, Any]:
    """How the session cookie is set: HttpOnly, SameSite=Strict, Secure when served over HTTPS."""
    store = session_store(request)
    options = store.options if store is not None else SessionOptions()
    return {
        "httponly": True,
        "samesite": "strict",
        "secure": request.url.scheme == "https",
        "path": "/",
        "max_age": int(options.lifetime_seconds),
    }


def csrf_matches(session: ConsoleSession, sent: str | None) -> bool:
    return sent is not None and hmac.compare_digest(session.csrf_token.encode(), sent.encode())


def check_csrf(request: Request, session: ConsoleSession, sent: str | None = None) -> None:
    """Refuse a write made with the session cookie but without the session's CSRF token."""
    if request.method not in WRITE_METHODS:
        return
    if not csrf_matches(session, sent if sent is not None else request.headers.get(CSRF_HEADER)):
        raise CsrfRefused(
            f"this {request.method} carries the console's session cookie but not its CSRF token",
            hint=f"send the {CSRF_HEADER} header from the page's <meta name='csrf-token'>, "
            "or reload the page",
        )


def find_session(request: Request, context: ServerContext) -> ConsoleSession | None:
    """The request's live session, or None (no cookie, unknown, expired or revoked token,
    password changed)."""
    token = request.cookies.get(SESSION_COOKIE)
    if not token:
        return None
    return store_of(request, context).find(token)


def current_session(request: Request, context: ServerContext) -> ConsoleSession | None:
    """For the REST API: None without a session cookie; the session, its CSRF token checked for
    writes; ``SessionExpired`` when the cookie no longer opens a session."""
    if not request.cookies.get(SESSION_COOKIE):
        return None
    session = find_session(request, context)
    if session is None:
        raise SessionExpired(
            "the console session has ended (signed out, expired, revoked, or the password changed)",
            hint="sign in again at /login",
        )
    check_csrf(request, session)
    return session
