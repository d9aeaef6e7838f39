"""The key a console's playground sends, per role, over real HTTP against a real server: an admin's
is the console's own (every project's deployments), a member's is their own, reaching only the
deployments of their projects (``tests/gateway/test_project_reach.py`` calls deployments with it)."""

from __future__ import annotations

import re

from modelyard.services.roles import Role
from teams.conftest import MEMBER_PROJECT, USERS, TeamServer

_KEY = re.compile(r'data-console-key="([^"]+)"')


def _playground_key(team_server: TeamServer, role: Role) -> str:
    client = team_server.console_client(role)
    try:
        page = client.get("/playground")
    finally:
        client.close()
    assert page.status_code == 200, page.text
    match = _KEY.search(page.text)
    assert match is not None, page.text
    return match.group(1)


def _key_by_prefix(team_server: TeamServer, key: str) -> dict[str, object]:
    with team_server.client(Role.ADMIN) as admin:
        listed = admin.get("/api/v1/keys")
    assert listed.status_code == 200, listed.text
    [record] = [record for record in listed.json() if key.startswith(str(record["prefix"]))]
    return dict(record)


def test_a_members_playground_sends_their_own_key_of_their_projects(team_server: TeamServer) -> None:
    key = _playground_key(team_server, Role.MEMBER)
    record = _key_by_prefix(team_server, key)
    assert record["name"] == f"playground-{USERS[Role.MEMBER]}"
    assert (record["reach"], record["project"]) == ("member_projects", MEMBER_PROJECT)
    # The same key on the next visit: one key per member, not one per page view.
    assert _playground_key(team_server, Role.MEMBER) == key
    with team_server.anonymous() as client:
        models = client.get("/v1/models", headers={"Authorization": f"Bearer {key}"})
    assert models.status_code == 200, models.text


def test_an_admins_playground_sends_the_consoles_key_of_every_project(team_server: TeamServer) -> None:
    key = _playground_key(team_server, Role.ADMIN)
    record = _key_by_prefix(team_server, key)
    assert str(record["name"]).startswith("console")
    assert record["reach"] == "every_project"
