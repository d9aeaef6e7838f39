"""Console sign-in: server-side sessions behind an HttpOnly cookie, and a CSRF token per session.

The console signs in with the admin's password (``modelyard.server.auth.authenticate``, so any
throttling there applies) and gets a random session token in the ``modelyard_session`` cookie
(HttpOnly, SameSite=Strict, Path=/). The session lives in the server's memory: a server restart
signs everyone out. Each session has its own CSRF token, put into every console page
(``<meta name="csrf-token">``); every write (POST, PUT, PATCH, DELETE) made with the session, a
form post as well as a fetch of the REST API, must send it back (``X-CSRF-Token`` header, or the
``csrf_token`` form field), else it is refused with 403.

A session ends on logout, after ``IDLE_SECONDS`` without a request, after ``LIFETIME_SECONDS``,
or when the user's password changes (the session remembers a digest of the password hash it
was opened with).

Usage::

    store = SessionStore()
    token, session = store.open(user_id=1, username="admin", password_hash=user.password_hash)
    response.set_cookie(SESSION_COOKIE, token, **cookie_options(request))
    session = current_session(request, context)   # None without a cookie; raises when stale
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from sqlalchemy import select

from modelyard.errors import Forbidden, Unauthorized
from modelyard.server.context import ServerContext
from modelyard.store.tables import User

SESSION_COOKIE = "modelyard_session"
CSRF_HEADER = "X-CSRF-Token"
CSRF_FORM_FIELD = "csrf_token"
IDLE_SECONDS = 12 * 3600.0
LIFETIME_SECONDS = 7 * 24 * 3600.0
MAXIMUM_SESSIONS = 1024
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class SessionExpired(Unauthorized):
    """The console's session cookie is unknown, expired or from before a password change.

    Answered without a ``WWW-Authenticate`` challenge, so a browser shows no Basic dialog.
    """

    code = "session_expired"


class CsrfRefused(Forbidden):
    code = "csrf_refused"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class ConsoleSession:
    user_id: int
    username: str
    csrf_token: str
    password_digest: str
    opened_at: float
    last_seen_at: float


@dataclass
class SessionStore:
    """Open sessions by token digest (the token itself is never kept). Thread-safe."""

    idle_seconds: float = IDLE_SECONDS
    lifetime_seconds: float = LIFETIME_SECONDS
    _sessions: dict[str, ConsoleSession] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def open(self, *, user_id: int, username: str, password_hash: str) -> tuple[str, ConsoleSession]:
        token = secrets.token_urlsafe(32)
        now = time.monotonic()
        session = ConsoleSession(
            user_id=user_id,
            username=username,
            csrf_token=secrets.token_urlsafe(32),
            password_digest=_digest(password_hash),
            opened_at=now,
            last_seen_at=now,
        )
        with self._lock:
            self._drop_expired(now)
            if len(self._sessions) >= MAXIMUM_SESSIONS:
                oldest = min(self._sessions, key=lambda key: self._sessions[key].last_seen_at)
                del self._sessions[oldest]
            self._sessions[_digest(token)] = session
        return token, session

    def find(self, token: str) -> ConsoleSession | None:
        """The live session of ``token`` (its idle clock restarted), or None."""
        now = time.monotonic()
        with self._lock:
            session = self._sessions.get(_digest(token))
            if session is None:
                return None
            if self._expired(session, now):
                del self._sessions[_digest(token)]
                return None
            session.last_seen_at = now
            return session

    def close(self, token: str) -> None:
        with self._lock:
            self._sessions.pop(_digest(token), None)

    def _expired(self, session: ConsoleSession, now: float) -> bool:
        return (
            now - session.last_seen_at > self.idle_seconds or now - session.opened_at > self.lifetime_seconds
        )

    def _drop_expired(self, now: float) -> None:
        for key in [key for key, session in self._sessions.items() if self._expired(session, now)]:
            del self._sessions[key]


def session_store(request: Request) -> SessionStore | None:
    """The app's store (``app.state.console_sessions``); None in an app without the console."""
    store = getattr(request.app.state, "console_sessions", None)
    return store if isinstance(store, SessionStore) else None


def cookie_options(request: Request) -> dict[str, Any]:
    """How the session cookie is set: HttpOnly, SameSite=Strict, Secure when served over HTTPS."""
    return {
        "httponly": True,
        "samesite": "strict",
        "secure": request.url.scheme == "https",
        "path": "/",
        "max_age": int(LIFETIME_SECONDS),
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


def _password_hash(context: ServerContext, user_id: int) -> str | None:
    with context.database.session() as session:
        return session.scalar(select(User.password_hash).where(User.id == user_id))


def find_session(request: Request, context: ServerContext) -> ConsoleSession | None:
    """The request's live session, or None (no cookie, unknown or expired token, password changed)."""
    token = request.cookies.get(SESSION_COOKIE)
    store = session_store(request)
    if not token or store is None:
        return None
    session = store.find(token)
    if session is None:
        return None
    password_hash = _password_hash(context, session.user_id)
    if password_hash is None or not hmac.compare_digest(_digest(password_hash), session.password_digest):
        store.close(token)
        return None
    return session


def current_session(request: Request, context: ServerContext) -> ConsoleSession | None:
    """For the REST API: None without a session cookie; the session, its CSRF token checked for
    writes; ``SessionExpired`` when the cookie no longer opens a session."""
    if not request.cookies.get(SESSION_COOKIE):
        return None
    session = find_session(request, context)
    if session is None:
        raise SessionExpired(
            "the console session has ended (signed out, expired, or the password changed)",
            hint="sign in again at /login",
        )
    check_csrf(request, session)
    return session
