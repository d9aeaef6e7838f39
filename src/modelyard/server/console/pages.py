"""The console's pages: server-rendered shells; each page's script reads and writes the REST API
(``/api/v1``) with the session cookie and the CSRF token, as the CLI does with HTTP Basic.

A page asked for without a session redirects to ``/login?next=<path>``; a page the user's role
may not open (``modelyard.server.policy``) is answered 403 with a page that says so. A page
shows only the controls its user's role may use, from the same table: templates ask
``may_call("METHOD /route")``, scripts ``mayCall`` (``console.js``, reading ``routes``); every
control says the route it calls in ``data-route`` (``local``: it calls none), which the role
walk of ``tests/e2e/test_pages.py`` checks.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse, Response

from modelyard.errors import ModelyardError
from modelyard.server.auth import SignedIn, session_user
from modelyard.server.console.assets import PLOTLY_JS
from modelyard.server.console.plotly_styles import bundle_style_ids
from modelyard.server.console.templates import NAVIGATION, render
from modelyard.server.context import ServerContext, server_context
from modelyard.server.policy import access_for, check_page, role_may_call, routes_for
from modelyard.server.sessions import find_session
from modelyard.services.console_key import (
    console_key_file,
    ensure_console_key,
    ensure_playground_key,
    playground_key_file,
)
from modelyard.services.roles import may, sees_every_project

router = APIRouter(include_in_schema=False)


async def _page(
    request: Request, context: ServerContext, template: str, title: str, page: str, **values: Any
) -> Response:
    session = await run_in_threadpool(find_session, request, context)
    if session is None:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={quote(target, safe='/')}", status_code=303)
    user: SignedIn | None = None
    try:
        user = await run_in_threadpool(session_user, context, session.user_id)
        check_page(request, user)
    except ModelyardError as refusal:
        return render(
            request,
            "forbidden.html",
            title="Not allowed",
            page="",
            status_code=refusal.http_status,
            csrf_token=session.csrf_token,
            username=session.username,
            message=refusal.message,
            hint=refusal.hint or "",
            navigation=_navigation(user) if user is not None else (),
        )
    return render(
        request,
        template,
        title=title,
        page=page,
        csrf_token=session.csrf_token,
        username=session.username,
        role=user.role.value,
        navigation=_navigation(user),
        may_call=lambda route: role_may_call(user.role, route),
        routes=routes_for(user.role),
        **values,
    )


def _navigation(user: SignedIn) -> tuple[tuple[str, str, str], ...]:
    """The sections the user's role may open (the others are not offered)."""
    return tuple(
        entry for entry in NAVIGATION if (access := access_for("GET", entry[1])) and may(user.role, access)
    )


@router.get("/")
async def dashboard(request: Request, context: ServerContext = Depends(server_context)) -> Response:
    return await _page(request, context, "dashboard.html", "Dashboard", "dashboard")


@router.get("/models")
async def models(request: Request, context: ServerContext = Depends(server_context)) -> Response:
    return await _page(request, context, "models.html", "Models", "models")


@router.get("/models/{name:path}")
async def model(name: str, request: Request, context: ServerContext = Depends(server_context)) -> Response:
    return await _page(request, context, "model.html", f"Model {name}", "models", name=name)


@router.get("/backends")
async def backends(request: Request, context: ServerContext = Depends(server_context)) -> Response:
    return await _page(request, context, "backends.html", "Backends", "backends")


@router.get("/deployments")
async def deployments(request: Request, context: ServerContext = Depends(server_context)) -> Response:
    return await _page(request, context, "deployments.html", "Deployments", "deployments")


@router.get("/deployments/new")
async def new_deployment(request: Request, context: ServerContext = Depends(server_context)) -> Response:
    return await _page(request, context, "deploy.html", "New deployment", "deployments")


@router.get("/deployments/{name:path}")
async def deployment(
    name: str, request: Request, context: ServerContext = Depends(server_context)
) -> Response:
    return await _page(request, context, "deployment.html", f"Deployment {name}", "deployments", name=name)


@router.get("/workers")
async def workers(request: Request, context: ServerContext = Depends(server_context)) -> Response:
    return await _page(request, context, "workers.html", "Workers", "workers")


def _playground_key(context: ServerContext, user_id: int) -> str:
    """The gateway key the user's playground sends: the console's own (every project's
    deployments) for admins and operators, a member's own for a member (their projects' only)."""
    user = session_user(context, user_id)
    data_dir = context.settings.data_dir
    with context.database.session() as session:
        if sees_every_project(user.role):
            key, created = ensure_console_key(session, console_key_file(data_dir))
        else:
            key, created = ensure_playground_key(session, playground_key_file(data_dir, user.id), user.id)
    if created:
        context.key_cache.invalidate()
    return key


@router.get("/playground")
async def playground(request: Request, context: ServerContext = Depends(server_context)) -> Response:
    session = await run_in_threadpool(find_session, request, context)
    # A key is made only for a signed-in user (``_page`` redirects everyone else).
    key = await run_in_threadpool(_playground_key, context, session.user_id) if session is not None else ""
    return await _page(request, context, "playground.html", "Playground", "playground", console_key=key)


@router.get("/benchmarks")
async def benchmarks(request: Request, context: ServerContext = Depends(server_context)) -> Response:
    return await _page(request, context, "benchmarks.html", "Benchmarks", "benchmarks")


@router.get("/benchmarks/{run_id}")
async def benchmark(
    run_id: str, request: Request, context: ServerContext = Depends(server_context)
) -> Response:
    return await _page(request, context, "benchmark.html", f"Benchmark {run_id}", "benchmarks", run_id=run_id)


@router.get("/tunes")
async def tunes(request: Request, context: ServerContext = Depends(server_context)) -> Response:
    return await _page(request, context, "tunes.html", "Tunes", "tunes")


@router.get("/tunes/{tune_id}")
async def tune(tune_id: str, request: Request, context: ServerContext = Depends(server_context)) -> Response:
    return await _page(request, context, "tune.html", f"Tune {tune_id}", "tunes", tune_id=tune_id)


@router.get("/keys")
async def keys(request: Request, context: ServerContext = Depends(server_context)) -> Response:
    return await _page(request, context, "keys.html", "API keys", "keys")


@router.get("/usage")
async def usage(request: Request, context: ServerContext = Depends(server_context)) -> Response:
    styles = bundle_style_ids(PLOTLY_JS)
    return await _page(request, context, "usage.html", "Usage", "usage", plotly_style_ids=styles)


@router.get("/audit")
async def audit(request: Request, context: ServerContext = Depends(server_context)) -> Response:
    return await _page(request, context, "audit.html", "Audit log", "audit")


@router.get("/account")
async def account(request: Request, context: ServerContext = Depends(server_context)) -> Response:
    return await _page(request, context, "account.html", "Account", "account", error="", message="")
