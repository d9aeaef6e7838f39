"""Who made a REST request: HTTP Basic ``<username>:<password>``, the console's session cookie
with its CSRF token (``modelyard.server.sessions``), or the CLI token (the admin). What that user
may do is decided in one place, ``modelyard.server.policy`` (by the user's role).

People log in with the password. It is checked against ``users.password_hash`` (scrypt, see
``modelyard.services.password_hashing``); scrypt is slow on purpose, so a successful check is
remembered for ``CACHE_SECONDS``. The cache key includes the stored hash: changing the password
drops every remembered login at once.

The CLI on the server's host sends ``Authorization: Bearer <token>`` instead, with the token the
server keeps in ``<data-dir>/cli-token`` (0600, made at the first start, the same for every start
on that data directory): a constant-time comparison, no scrypt per command. Whoever can read that
file can read ``admin-password`` beside it, so it grants nothing more.

Usage::

    user: SignedIn = Depends(require_user)   # who; server/policy.py's ``authorize`` checks the role
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import Depends, Request
from fastapi.security import HTTPBasic, HTTPBasicCredentials
from sqlalchemy import select

from modelyard.errors import Forbidden, Unauthorized
from modelyard.server.context import ServerContext, server_context
from modelyard.server.sessions import current_session
from modelyard.server.throttle import guarded
from modelyard.services.password_hashing import hash_password, verify_password
from modelyard.services.roles import Role
from modelyard.services.users import ADMIN_USERNAME, write_password_file
from modelyard.store.tables import User

CACHE_SECONDS = 60.0
CACHE_MAX_ENTRIES = 256

_basic = HTTPBasic(auto_error=False, realm="modelyard")


@dataclass
class VerifiedLoginCache:
    """Logins that passed scrypt recently: fingerprint -> monotonic expiry time."""

    ttl_seconds: float = CACHE_SECONDS
    _expiries: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @staticmethod
    def fingerprint(username: str, password: str, stored_hash: str) -> str:
        return hashlib.sha256(f"{username}\0{password}\0{stored_hash}".encode()).hexdigest()

    def contains(self, fingerprint: str) -> bool:
        with self._lock:
            expiry = self._expiries.get(fingerprint)
            if expiry is None:
                return False
            if expiry < time.monotonic():
                del self._expiries[fingerprint]
                return False
            return True

    def add(self, fingerprint: str) -> None:
        with self._lock:
            if len(self._expiries) >= CACHE_MAX_ENTRIES:
                self._expiries.clear()
            self._expiries[fingerprint] = time.monotonic() + self.ttl_seconds


_verified_logins = VerifiedLoginCache()


@dataclass(frozen=True)
class SignedIn:
    """Who made the request, and their role (read from ``users`` at each request)."""

    id: int
    username: str
    role: Role = Role.ADMIN


# The name from when every user was an admin.
AdminUser = SignedIn


def _signed_in(user: User) -> SignedIn:
    """The user as signed in; ``Forbidden`` for a disabled user."""
    if user.disabled:
        raise Forbidden(
            f"user {user.username!r} is disabled",
            hint="ask an admin to enable the account (modelyard users update NAME --enable)",
        )
    return SignedIn(id=user.id, username=user.username, role=Role(user.role))


@functools.cache
def _unknown_user_hash() -> str:
    """A hash no password matches, checked for unknown users (computed once, at the first)."""
    return hash_password(secrets.token_urlsafe(32))


def authenticate(context: ServerContext, username: str, password: str) -> AdminUser:
    """Check one username and password against the store. Raises ``Unauthorized``/``Forbidden``."""
    with context.database.session() as session:
        user = session.scalar(select(User).where(User.username == username))
    if user is None:
        # As slow as a wrong password: the time taken does not tell which users exist.
        verify_password(password, _unknown_user_hash())
        raise Unauthorized(
            "wrong username or password",
            hint="log in as admin with the password from <data-dir>/admin-password",
        )
    fingerprint = VerifiedLoginCache.fingerprint(username, password, user.password_hash)
    if not _verified_logins.contains(fingerprint):
        if not verify_password(password, user.password_hash):
            raise Unauthorized(
                "wrong username or password",
                hint="log in as admin with the password from <data-dir>/admin-password",
            )
        _verified_logins.add(fingerprint)
    return _signed_in(user)


def ensure_cli_token(token_file: Path) -> str:
    """The CLI token kept in ``token_file``; made (mode 0600) when the file is missing or empty."""
    try:
        token = token_file.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        token = ""
    if not token:
        token = secrets.token_urlsafe(32)
        write_password_file(token_file, token)
    return token


def authenticate_cli_token(context: ServerContext, token: str) -> AdminUser:
    """The admin, when ``token`` is this server's CLI token. Raises ``Unauthorized``."""
    expected = context.cli_token
    if expected is None or not hmac.compare_digest(token.encode(), expected.encode()):
        raise Unauthorized(
            "the CLI token was refused",
            hint=(
                "the CLI reads <data-dir>/cli-token: point --data-dir (or MODELYARD_DATA_DIR) at this "
                "server's data directory, or set MODELYARD_PASSWORD"
            ),
        )
    with context.database.session() as session:
        user = session.scalar(select(User).where(User.username == ADMIN_USERNAME))
    if user is None or user.role != Role.ADMIN:
        raise Forbidden(f"user {ADMIN_USERNAME!r} is not an administrator")
    return _signed_in(user)


def session_user(context: ServerContext, user_id: int) -> SignedIn:
    with context.database.session() as session:
        user = session.get(User, user_id)
    if user is None:
        raise Unauthorized("the console session's user no longer exists", hint="sign in again at /login")
    return _signed_in(user)


def require_user(
    request: Request,
    credentials: HTTPBasicCredentials | None = Depends(_basic),
    context: ServerContext = Depends(server_context),
) -> SignedIn:
    """FastAPI dependency: who is signed in, or ``Unauthorized`` (sync: FastAPI runs it in a
    worker thread, off the event loop). It checks no role: ``server/policy.py`` does."""
    # Wrong credentials are counted per client address (server/throttle.py): past a few, the
    # address waits, doubling each time, answered 429 without a scrypt run; loopback never waits.
    address = request.client.host if request.client else None
    throttle = context.login_throttle
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return guarded(throttle, address, authenticate_cli_token, context, value.strip())
    if credentials is None:
        console_session = current_session(request, context)
        if console_session is not None:
            return session_user(context, console_session.user_id)
        raise Unauthorized(
            "this endpoint needs credentials (HTTP Basic): the admin's or another user's",
            hint="send admin:<password>; the password is in <data-dir>/admin-password",
        )
    return guarded(throttle, address, authenticate, context, credentials.username, credentials.password)


# The name from when every user was an admin (who is signed in; the role is checked elsewhere).
require_admin = require_user
