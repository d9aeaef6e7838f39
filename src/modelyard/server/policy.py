"""What each role may do, for every route of the server: the one table (``ROUTE_ACCESS``) and the
one check (``authorize``).

The REST router runs ``authorize`` before every route (``server/api/router.py``); console pages
run ``check_page`` (``server/console/pages.py``), and show only the controls whose route the
user's role may call (``role_may_call`` in templates, ``routes_for`` for their scripts), so a
page never offers what the server would refuse. A route missing from the table is refused to
everyone, with a message naming it, and ``tests/api/test_route_roles.py`` walks every route of
the app with every role, so a new route without a line here fails that test. What a member sees
through the routes open to members is narrowed to the member's projects by the routes
themselves (``modelyard.services.projects.visible_project_ids``).

Usage::

    api_router = APIRouter(prefix="/api/v1", dependencies=[Depends(authorize)])
    user: SignedIn = Depends(authorize)     # in a route that needs to know who (cached per request)
"""

from __future__ import annotations

from fastapi import Depends, Request

from modelyard.errors import Forbidden
from modelyard.server.auth import SignedIn, require_user
from modelyard.services.roles import Access, Role, may, roles_with

API_PREFIX = "/api/v1"

A = Access.ADMIN
O = Access.OPERATOR  # noqa: E741 - one letter keeps the table readable
M = Access.MEMBER
P = Access.PUBLIC

# "METHOD path" (the route's path template, as FastAPI declares it) -> what it asks for.
ROUTE_ACCESS: dict[str, Access] = {
    # The server, the account
    "GET /api/v1/system": M,
    "GET /api/v1/gpus": O,
    "PUT /api/v1/auth/password": M,
    # Models, backends, tasks, presets, registry credentials
    "GET /api/v1/models": O,
    "POST /api/v1/models": O,
    "POST /api/v1/models/push": O,
    "POST /api/v1/models/{name:path}/push": O,
    "POST /api/v1/models/pull": O,
    "POST /api/v1/models/import": O,
    "POST /api/v1/models/{name:path}/export": O,
    "GET /api/v1/models/{name:path}": O,
    "DELETE /api/v1/models/{name:path}": O,
    "POST /api/v1/backends/check": O,
    "GET /api/v1/backends": O,
    "POST /api/v1/backends/import": O,
    "GET /api/v1/backends/{name}/export": O,
    "GET /api/v1/backends/{name}": O,
    "DELETE /api/v1/backends/{name}": O,
    "GET /api/v1/tasks": O,
    "GET /api/v1/tasks/{task_id}": O,
    "POST /api/v1/tasks/{task_id}/cancel": O,
    "POST /api/v1/tasks/{task_id}/resume": O,
    "GET /api/v1/presets": O,
    "GET /api/v1/presets/{name}": O,
    "GET /api/v1/registry-credentials": A,
    "POST /api/v1/registry-credentials": A,
    "DELETE /api/v1/registry-credentials/{name}": A,
    # Deployments: members read their projects' ones
    "GET /api/v1/deployments/{name:path}/logs/starts": O,
    "GET /api/v1/deployments/{name:path}/logs": O,
    "POST /api/v1/deployments/preflight": O,
    "GET /api/v1/deployments": M,
    "POST /api/v1/deployments": O,
    "POST /api/v1/deployments/{name:path}/stop": O,
    "POST /api/v1/deployments/{name:path}/start": O,
    "POST /api/v1/deployments/{name:path}/verify": O,
    "GET /api/v1/deployments/{name:path}/autoscale": O,
    "GET /api/v1/deployments/{name:path}/events": M,
    "GET /api/v1/deployments/{name:path}": M,
    "PATCH /api/v1/deployments/{name:path}": O,
    "DELETE /api/v1/deployments/{name:path}": O,
    # Keys: a member makes, rotates and revokes their own, in one of their projects
    "GET /api/v1/keys": M,
    "POST /api/v1/keys": M,
    "POST /api/v1/keys/{name:path}/rotate": M,
    "DELETE /api/v1/keys/{name:path}": M,
    # Usage: a member's projects' keys
    "GET /api/v1/usage/timeline": M,
    "GET /api/v1/usage/report": M,
    "GET /api/v1/usage": M,
    # Benchmarks, workers, the estimator's observations
    "GET /api/v1/benchmarks": O,
    "POST /api/v1/benchmarks": O,
    "GET /api/v1/benchmarks/compare": O,
    "GET /api/v1/benchmarks/{run_id}": O,
    "GET /api/v1/benchmarks/{run_id}/report": O,
    "GET /api/v1/benchmarks/{run_id}/output": O,
    "DELETE /api/v1/benchmarks/{run_id}": O,
    "GET /api/v1/tunes": O,
    "POST /api/v1/tunes": O,
    "GET /api/v1/tunes/{tune_id}": O,
    "GET /api/v1/workers": O,
    "GET /api/v1/start-observations": O,
    "DELETE /api/v1/start-observations": A,
    # Users, projects, the audit log
    "GET /api/v1/users": A,
    "POST /api/v1/users": A,
    "GET /api/v1/users/me": M,
    "PATCH /api/v1/users/{username}": A,
    "DELETE /api/v1/users/{username}": A,
    "GET /api/v1/projects": M,
    "POST /api/v1/projects": A,
    "GET /api/v1/projects/{name}": M,
    "PATCH /api/v1/projects/{name}": A,
    "DELETE /api/v1/projects/{name}": A,
    "PUT /api/v1/projects/{name}/members/{username}": A,
    "DELETE /api/v1/projects/{name}/members/{username}": A,
    "GET /api/v1/audit": O,
    # Console sessions: an admin lists and ends them
    "GET /api/v1/sessions": A,
    "DELETE /api/v1/sessions/{session_id}": A,
    "DELETE /api/v1/sessions": A,
    # Console pages
    "GET /": M,
    "GET /models": O,
    "GET /models/{name:path}": O,
    "GET /backends": O,
    "GET /deployments": M,
    "GET /deployments/new": O,
    "GET /deployments/{name:path}": M,
    "GET /workers": O,
    "GET /playground": M,
    "GET /benchmarks": O,
    "GET /benchmarks/{run_id}": O,
    "GET /tunes": O,
    "GET /tunes/{tune_id}": O,
    "GET /keys": M,
    "GET /usage": M,
    "GET /account": M,
    "GET /audit": O,
    # Signing in, static files, the API's description; /metrics has its own scrape token
    "GET /login": P,
    "POST /login": P,
    "GET /login/oidc": P,
    "GET /login/oidc/callback": P,
    "POST /logout": P,
    "POST /account/password": P,
    "GET /api/openapi.json": P,
    "GET /api/docs": P,
    "GET /console/vendor/plotly.min.js": P,
    "GET /console/vendor/plotly.css": P,
    "GET /metrics": P,
}
# Mounted folders of static files: everything under them is public.
PUBLIC_MOUNTS = ("/console/static", "/api/docs/assets")


def access_for(method: str, path: str) -> Access | None:
    """What the route ``method path`` asks for; None: the route has no line in the table."""
    return ROUTE_ACCESS.get(f"{method} {path}")


def role_may_call(role: Role, route: str) -> bool:
    """Whether ``role`` may call ``route`` ("POST /api/v1/deployments/{name:path}/stop", as in
    the table): what a console page asks before it shows a control. A route with no line in the
    table is a mistake in the page (a typo, a renamed route): ``KeyError`` naming it."""
    access = ROUTE_ACCESS.get(route)
    if access is None:
        raise KeyError(f"console control names route {route!r}, which has no line in ROUTE_ACCESS")
    return may(role, access)


def routes_for(role: Role) -> dict[str, bool]:
    """Every route of the table and whether ``role`` may call it: what a console page's scripts
    read (``mayCall`` in ``console.js``) to leave out the controls that would only be refused."""
    return {route: may(role, access) for route, access in ROUTE_ACCESS.items()}


def check(user: SignedIn, method: str, path: str) -> None:
    """``Forbidden`` unless ``user``'s role may call ``method path`` (the route's template)."""
    method = "GET" if method == "HEAD" else method
    access = access_for(method, path)
    if access is None:
        raise Forbidden(
            f"route {method} {path} has no access policy, so nobody may call it",
            hint="add it to ROUTE_ACCESS in modelyard/server/policy.py",
        )
    if not may(user.role, access):
        allowed = " or ".join(role.value for role in roles_with(access))
        raise Forbidden(
            f"role {user.role.value!r} may not {method} {path}: it is for {allowed}",
            hint=f"ask an admin to give user {user.username!r} another role "
            "(modelyard users update NAME --role ROLE); docs/security.md lists what each role may do",
        )


def _route_path(request: Request, prefix: str) -> str:
    route = request.scope.get("route")
    path = getattr(route, "path", None)
    if not isinstance(path, str):
        return request.url.path
    # FastAPI keeps an included router's own path on the route; the table has the full one.
    return path if path.startswith(prefix) else prefix + path


def authorize(request: Request, user: SignedIn = Depends(require_user)) -> SignedIn:
    """FastAPI dependency of every REST route: the signed-in user, after the role check."""
    check(user, request.method, _route_path(request, API_PREFIX))
    return user


def check_page(request: Request, user: SignedIn) -> None:
    """The role check of a console page (its route has no prefix)."""
    check(user, request.method, _route_path(request, ""))
