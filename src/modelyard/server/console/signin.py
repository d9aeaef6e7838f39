"""Signing in and out of the console, and changing the password.

``/login`` is a form protected by a double-submit token (a cookie of its own and the same value
in the form), so another site cannot sign a browser in; ``/logout`` and ``/account/password``
need the session's CSRF token like every other write.
"""

from __future__ import annotations

import hmac
import secrets

from fastapi import APIRouter, Depends, Form, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse, Response

from modelyard.errors import ModelyardError
from modelyard.server.api.common import in_session
from modelyard.server.auth import authenticate
from modelyard.server.console.templates import render
from modelyard.server.context import ServerContext, server_context
from modelyard.server.oidc.provider import oidc_provider
from modelyard.server.sessions import (
    SESSION_COOKIE,
    ConsoleSession,
    cookie_options,
    csrf_matches,
    find_session,
    session_store,
)
from modelyard.server.throttle import guarded
from modelyard.services import audit, users

router = APIRouter(include_in_schema=False)

LOGIN_COOKIE = "modelyard_login"


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a path of this site only (never ``//host`` or a URL)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def login_page(request: Request, *, next_path: str, error: str = "", status_code: int = 200) -> Response:
    token = secrets.token_urlsafe(24)
    response = render(
        request,
        "login.html",
        title="Sign in",
        page="login",
        login_token=token,
        next_path=next_path,
        error=error,
        oidc_name=provider.settings.display_name if (provider := oidc_provider(request)) else None,
        status_code=status_code,
    )
    response.set_cookie(LOGIN_COOKIE, token, httponly=True, samesite="strict", path="/login", max_age=3600)
    return response


def _open_session(request: Request, context: ServerContext, username: str) -> tuple[str, ConsoleSession]:
    store = session_store(request)
    assert store is not None, "install_console() sets app.state.console_sessions"
    with context.database.session() as session:
        user = users.get_user(session, username)
    return store.open(
        user_id=user.id,
        username=user.username,
        password_hash=user.password_hash,
        method="password",
        client_address=request.client.host if request.client else None,
    )


@router.get("/login")
async def login_form(request: Request, next: str | None = None) -> Response:
    return login_page(request, next_path=safe_next(next))


@router.post("/login")
async def login(
    request: Request,
    username: str = Form(default="admin"),
    password: str = Form(default=""),
    login_token: str = Form(default=""),
    next: str = Form(default="/"),
    context: ServerContext = Depends(server_context),
) -> Response:
    next_path = safe_next(next)
    expected = request.cookies.get(LOGIN_COOKIE, "")
    if not expected or not hmac.compare_digest(expected.encode(), login_token.encode()):
        return login_page(
            request, next_path=next_path, error="The sign-in form expired; try again.", status_code=403
        )
    try:
        address = request.client.host if request.client else None
        admin = await run_in_threadpool(
            guarded, context.login_throttle, address, authenticate, context, username.strip(), password
        )
    except ModelyardError as error:
        return login_page(request, next_path=next_path, error=error.message, status_code=error.http_status)
    token, _ = await run_in_threadpool(_open_session, request, context, admin.username)
    await in_session(
        context,
        audit.record_committed,
        actor=admin.username,
        action="login",
        object_type="session",
        object_name=admin.username,
        details={"method": "password", "address": address},
    )
    response = RedirectResponse(next_path, status_code=303)
    response.set_cookie(SESSION_COOKIE, token, **cookie_options(request))
    response.delete_cookie(LOGIN_COOKIE, path="/login")
    return response


@router.post("/logout")
async def logout(
    request: Request, csrf_token: str = Form(default=""), context: ServerContext = Depends(server_context)
) -> Response:
    session = await run_in_threadpool(find_session, request, context)
    store = session_store(request)
    if session is not None and store is not None and csrf_matches(session, csrf_token):
        store.close(request.cookies.get(SESSION_COOKIE, ""))
    elif session is not None:
        return Response("the sign-out form lacks its CSRF token; reload the page", status_code=403)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


def _change_password(context: ServerContext, username: str, current: str, new: str) -> None:
    with context.database.session() as session:
        users.change_password(session, username, current, new, context.settings.admin_password_file)


@router.post("/account/password")
async def change_password(
    request: Request,
    current_password: str = Form(default=""),
    new_password: str = Form(default=""),
    confirm_password: str = Form(default=""),
    csrf_token: str = Form(default=""),
    context: ServerContext = Depends(server_context),
) -> Response:
    session = await run_in_threadpool(find_session, request, context)
    if session is None:
        return RedirectResponse("/login?next=/account", status_code=303)
    if not csrf_matches(session, csrf_token):
        return Response("the form lacks its CSRF token; reload the page", status_code=403)

    def page(error: str = "", message: str = "", status_code: int = 200, csrf: str = "") -> Response:
        return render(
            request,
            "account.html",
            title="Account",
            page="account",
            csrf_token=csrf or session.csrf_token,
            username=session.username,
            error=error,
            message=message,
            status_code=status_code,
        )

    if new_password != confirm_password:
        return page(error="The new password and its confirmation differ.", status_code=400)
    try:
        await run_in_threadpool(_change_password, context, session.username, current_password, new_password)
    except ModelyardError as error:
        hint = f" ({error.hint})" if error.hint else ""
        return page(error=error.message + hint, status_code=error.http_status)
    # The password changed, so every session (this one too) ended: open a fresh one here.
    token, fresh = await run_in_threadpool(_open_session, request, context, session.username)
    response = page(
        message="Password changed. Other sessions are signed out; the CLI reads the new password file.",
        csrf=fresh.csrf_token,
    )
    response.set_cookie(SESSION_COOKIE, token, **cookie_options(request))
    return response
