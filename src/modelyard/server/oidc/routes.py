"""``/login/oidc`` (sends the browser to the provider) and ``/login/oidc/callback`` (back from it).

The sign-in in progress (state, nonce, PKCE verifier, where to go next) is kept in the
``modelyard_oidc`` cookie, sealed with the data directory's ``secret-key`` (Fernet: encrypted and
authenticated), HttpOnly, ``SameSite=Lax`` (the provider's redirect back is a cross-site
navigation) and limited to ``/login/oidc``, for ``PENDING_SECONDS``. Nothing is kept on the
server, so any process may answer the callback.

The callback answers a small page that moves on to the console itself, rather than a redirect:
a ``SameSite=Strict`` session cookie set at the end of a cross-site redirect chain would not be
sent with the next request of that chain.

Every failure is shown on the sign-in page and logged (warning) in one line, without secrets.
"""

from __future__ import annotations

import html
import json
import logging
import secrets
import time
from dataclasses import asdict

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import HTMLResponse, RedirectResponse, Response

from modelyard.errors import ModelyardError, SignInMismatch, TokenRefused
from modelyard.server.console.signin import login_page, safe_next
from modelyard.server.context import ServerContext, server_context
from modelyard.server.oidc.accounts import SignedInAccount, account_for
from modelyard.server.oidc.claims import projects_for_claims, role_for_claims, username_for_claims
from modelyard.server.oidc.provider import OidcProvider, PendingSignIn, oidc_provider
from modelyard.server.sessions import SESSION_COOKIE, cookie_options, store_of
from modelyard.services.roles import Role

logger = logging.getLogger(__name__)

router = APIRouter(include_in_schema=False)

PENDING_COOKIE = "modelyard_oidc"
PENDING_PATH = "/login/oidc"
PENDING_SECONDS = 600
CALLBACK_PATH = "/login/oidc/callback"


def _redirect_uri(request: Request, provider: OidcProvider) -> str:
    if provider.settings.redirect_url:
        return provider.settings.redirect_url
    return str(request.base_url).rstrip("/") + CALLBACK_PATH


def _failed(request: Request, error: ModelyardError, *, step: str) -> Response:
    logger.warning("single sign-on failed at %s: %s", step, error)
    hint = f" ({error.hint})" if error.hint else ""
    return login_page(request, next_path="/", error=error.message + hint, status_code=error.http_status)


def _mismatch(message: str) -> SignInMismatch:
    return SignInMismatch(message, hint="start again from the sign-in page, in the same browser")


@router.get(PENDING_PATH)
async def start_sign_in(request: Request, next: str | None = None) -> Response:
    provider = oidc_provider(request)
    if provider is None:
        return RedirectResponse("/login", status_code=303)
    context: ServerContext = request.app.state.context
    try:
        start = await provider.start(_redirect_uri(request, provider), safe_next(next))
    except ModelyardError as error:
        return _failed(request, error, step="discovery")
    response = RedirectResponse(start.url, status_code=303)
    response.set_cookie(
        PENDING_COOKIE,
        context.secrets.seal(json.dumps(asdict(start.pending))),
        max_age=PENDING_SECONDS,
        path=PENDING_PATH,
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
    )
    return response


def _pending(request: Request, context: ServerContext) -> PendingSignIn:
    sealed = request.cookies.get(PENDING_COOKIE)
    if not sealed:
        raise _mismatch("no sign-in was started in this browser, or it expired (10 minutes)")
    try:
        pending = PendingSignIn(**json.loads(context.secrets.reveal(sealed)))
    except (ModelyardError, ValueError, TypeError):
        raise _mismatch(
            "this browser's sign-in cookie cannot be read (another server's, or altered)"
        ) from None
    if time.time() - pending.started_at > PENDING_SECONDS:
        raise _mismatch("the sign-in took longer than 10 minutes")
    return pending


@router.get(CALLBACK_PATH)
async def finish_sign_in(
    request: Request,
    code: str | None = None,
    state: str | None = None,
    error: str | None = None,
    error_description: str | None = None,
    context: ServerContext = Depends(server_context),
) -> Response:
    provider = oidc_provider(request)
    if provider is None:
        return RedirectResponse("/login", status_code=303)
    settings = provider.settings
    try:
        pending = _pending(request, context)
        if state is None or not secrets.compare_digest(state.encode(), pending.state.encode()):
            raise _mismatch("the provider's answer does not carry the state this browser's sign-in sent")
        if error is not None:
            said = error + (f": {error_description[:200]}" if error_description else "")
            raise TokenRefused(
                f"the provider refused the sign-in ({said})",
                hint="check that this account may use the client at the provider",
            )
        if not code:
            raise _mismatch("the provider's answer has no code")
        claims = await provider.finish(pending, code, _redirect_uri(request, provider))
        role = Role(role_for_claims(claims, settings.roles))
        username = username_for_claims(claims, settings.username_claim)
        address = request.client.host if request.client else None

        def sign_in() -> SignedInAccount:
            with context.database.session() as session:
                return account_for(
                    session,
                    issuer=settings.issuer,
                    subject=str(claims["sub"]),
                    username=username,
                    role=role,
                    address=address,
                    projects=projects_for_claims(claims, settings.projects),
                    managed_projects=settings.projects.managed,
                )

        account = await run_in_threadpool(sign_in)
    except ModelyardError as failure:
        return _failed(request, failure, step="the callback")
    if account.created:
        logger.info(
            "made user %r (role %s) at its first sign-in through %s", account.username, role, settings.issuer
        )
    if account.joined or account.left:
        # A member's playground key reaches their projects' deployments (``KeyFacts.reaches``).
        context.key_cache.invalidate()
        logger.info(
            "user %r joined %s and left %s by the provider's claims",
            account.username,
            ", ".join(account.joined) or "no project",
            ", ".join(account.left) or "none",
        )
    store = store_of(request, context)
    token, _ = await run_in_threadpool(
        lambda: store.open(
            user_id=account.user_id,
            username=account.username,
            password_hash=account.password_hash,
            method="oidc",
            client_address=address,
        )
    )
    target = html.escape(pending.next_path, quote=True)
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="0;url={target}"><title>Signed in</title></head>'
        f'<body><p>Signed in. <a href="{target}">Continue to the console</a>.</p></body></html>'
    )
    response = HTMLResponse(page)
    response.set_cookie(SESSION_COOKIE, token, **cookie_options(request))
    response.delete_cookie(PENDING_COOKIE, path=PENDING_PATH)
    return response
