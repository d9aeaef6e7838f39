"""The route-by-role matrix: every route of the app, asked by every role over real HTTP, is
allowed or refused (403, naming the role and the route) as ``server/policy.py`` says, and a
route without a line there fails here.

The routes are read from the app itself (``create_app``'s routes, included routers walked), so a
route added without an access policy is found. Path parameters are filled with names that do
not exist, so an allowed call changes nothing (404, 422 or an empty answer), and bodies are
``{}``."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from fastapi.routing import iter_route_contexts
from starlette.routing import Mount

from modelyard.server.app import create_app
from modelyard.server.context import ServerContext
from modelyard.server.policy import PUBLIC_MOUNTS, ROUTE_ACCESS
from modelyard.services.roles import Access, Role, may
from modelyard.settings import Settings
from modelyard.store.database import Database
from modelyard.testing.http_clients import shared_tls_context
from teams.conftest import TeamServer

_PARAMETER = re.compile(r"\{([a-z_]+)(:path)?\}")
_PLACEHOLDERS = {"task_id": "999999", "run_id": "no-such-run"}


def _app_routes(tmp_path: Path) -> tuple[set[str], set[str]]:
    """Every "METHOD path" of the server's app, and its mounted folders."""
    database = Database.open(f"sqlite:///{tmp_path / 'routes.db'}")
    try:
        app = create_app(
            ServerContext(settings=Settings(data_dir=tmp_path, deploy_demo=False), database=database)
        )
        routes: set[str] = set()
        mounts: set[str] = set()
        for route in iter_route_contexts(app.routes):
            if isinstance(route.original_route, Mount):
                mounts.add(str(route.path))
                continue
            methods = getattr(route.original_route, "methods", None) or set()
            routes |= {f"{method} {route.path}" for method in methods if method != "HEAD"}
        return routes, mounts
    finally:
        database.close()


@pytest.fixture(scope="module")
def app_routes(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    routes, mounts = _app_routes(tmp_path_factory.mktemp("routes"))
    assert mounts == set(PUBLIC_MOUNTS), f"mounted folders {sorted(mounts)}: list them in PUBLIC_MOUNTS"
    return routes


def _url(path: str) -> str:
    return _PARAMETER.sub(lambda match: _PLACEHOLDERS.get(match.group(1), "no-such-thing"), path)


def _ask(client: httpx.Client, route: str) -> httpx.Response:
    method, path = route.split(" ", 1)
    if method in ("POST", "PUT", "PATCH"):
        return client.request(method, _url(path), json={})
    return client.request(method, _url(path))


def test_every_route_of_the_app_has_an_access_policy_and_every_policy_a_route(app_routes: set[str]) -> None:
    missing = sorted(app_routes - set(ROUTE_ACCESS))
    assert not missing, f"routes without a line in ROUTE_ACCESS (server/policy.py): {missing}"
    stale = sorted(set(ROUTE_ACCESS) - app_routes)
    assert not stale, f"lines of ROUTE_ACCESS for routes the app does not have: {stale}"


@pytest.mark.parametrize("role", list(Role))
def test_each_role_is_allowed_or_refused_every_rest_route_as_the_matrix_says(
    team_server: TeamServer, app_routes: set[str], role: Role
) -> None:
    routes = sorted(route for route in app_routes if route.split(" ", 1)[1].startswith("/api/v1/"))
    wrong: list[str] = []
    with team_server.client(role) as client:
        for route in routes:
            access = ROUTE_ACCESS[route]
            answer = _ask(client, route)
            method, path = route.split(" ", 1)
            if may(role, access):
                if answer.status_code in (401, 403):
                    wrong.append(
                        f"{route}: {role} allowed by the matrix, answered {answer.status_code} {answer.text}"
                    )
                continue
            error = answer.json().get("error", {}) if answer.status_code == 403 else {}
            if answer.status_code != 403 or f"role {role.value!r} may not {method} {path}" not in error.get(
                "message", ""
            ):
                wrong.append(
                    f"{route}: {role} refused by the matrix, answered {answer.status_code} {answer.text}"
                )
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("role", list(Role))
def test_each_role_opens_the_console_pages_the_matrix_gives_it(
    team_server: TeamServer, app_routes: set[str], role: Role
) -> None:
    pages = sorted(
        route
        for route in app_routes
        if route.startswith("GET ")
        and not route.split(" ", 1)[1].startswith("/api/")
        and ROUTE_ACCESS[route] != Access.PUBLIC
    )
    assert "GET /audit" in pages
    wrong: list[str] = []
    client = team_server.console_client(role)
    try:
        for route in pages:
            answer = _ask(client, route)
            expected = 200 if may(role, ROUTE_ACCESS[route]) else 403
            if answer.status_code != expected:
                wrong.append(f"{route}: {role} expected {expected}, answered {answer.status_code}")
            elif expected == 403 and f"role {role.value!r} may not GET" not in answer.text.replace(
                "&#39;", "'"
            ):
                wrong.append(f"{route}: the refusal page does not say why: {answer.text[:300]}")
    finally:
        client.close()
    assert not wrong, "\n".join(wrong)


_PAGE_SCRIPT = re.compile(r'<script type="module" src="(/console/static/pages/[a-z_]+\.js)"')
_PLAIN_GET = re.compile(r'\bapi\("/([a-z_/-]+)"\)')


@pytest.mark.parametrize("role", list(Role))
def test_a_page_leaves_out_what_its_script_would_be_refused_for_the_role(
    team_server: TeamServer, app_routes: set[str], role: Role
) -> None:
    """A page's script reads ``api("/gpus")`` into the element ``id="gpus"``: where the role may
    not ``GET /api/v1/gpus``, the page has no such element, so the script does not ask (the
    member's dashboard had asked and met a 403 at every poll)."""
    pages = sorted(
        route.split(" ", 1)[1]
        for route in app_routes
        if route.startswith("GET ")
        and "{" not in route
        and not route.split(" ", 1)[1].startswith("/api/")
        and ROUTE_ACCESS[route] != Access.PUBLIC
        and may(role, ROUTE_ACCESS[route])
    )
    checked: list[str] = []
    wrong: list[str] = []
    client = team_server.console_client(role)
    try:
        for path in pages:
            page = client.get(path)
            assert page.status_code == 200, f"{path}: {page.status_code}"
            for script in _PAGE_SCRIPT.findall(page.text):
                for api_path in _PLAIN_GET.findall(client.get(script).text):
                    route = f"GET /api/v1/{api_path}"
                    if route not in ROUTE_ACCESS or may(role, ROUTE_ACCESS[route]):
                        continue
                    checked.append(f"{path} {route}")
                    if f'id="{api_path.rsplit("/", 1)[-1]}"' in page.text:
                        wrong.append(f"{path}: {role}'s page has the section its script fills from {route}")
    finally:
        client.close()
    assert not wrong, "\n".join(wrong)
    if role == Role.MEMBER:
        assert "/ GET /api/v1/gpus" in checked


def test_without_credentials_every_route_but_the_public_ones_is_refused(
    team_server: TeamServer, app_routes: set[str]
) -> None:
    wrong: list[str] = []
    with team_server.anonymous() as client:
        for route in sorted(app_routes):
            if ROUTE_ACCESS[route] == Access.PUBLIC:
                continue
            answer = _ask(client, route)
            api = route.split(" ", 1)[1].startswith("/api/")
            expected = 401 if api else 303  # a page sends the browser to /login
            if answer.status_code != expected:
                wrong.append(
                    f"{route}: expected {expected} without credentials, answered {answer.status_code}"
                )
    assert not wrong, "\n".join(wrong)


def test_a_disabled_user_is_refused_with_a_message_that_says_so(team_server: TeamServer) -> None:
    with team_server.client(Role.ADMIN) as admin:
        made = admin.post(
            "/api/v1/users", json={"username": "dora", "password": "correct horse battery staple"}
        )
        assert made.status_code == 201, made.text
        assert admin.patch("/api/v1/users/dora", json={"disabled": True}).status_code == 200
    with httpx.Client(
        base_url=team_server.url,
        auth=("dora", "correct horse battery staple"),
        trust_env=False,
        verify=shared_tls_context(),
    ) as dora:
        answer = dora.get("/api/v1/system")
    assert answer.status_code == 403
    assert "user 'dora' is disabled" in answer.json()["error"]["message"]
