"""``modelyard audit``, ``users`` and ``projects`` as a user on the server's host runs them (the
real command, a child process, against the real server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from modelyard.services.roles import Role
from teams.conftest import PASSWORD, USERS, TeamServer


def _modelyard(
    team: TeamServer, *arguments: str, user: str | None = None
) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "NO_COLOR": "1", "MODELYARD_URL": team.url}
    if user is None:
        environment["MODELYARD_DATA_DIR"] = str(team.server.data_dir)  # the CLI token: the admin
    else:
        environment.update(MODELYARD_USER=user, MODELYARD_PASSWORD=PASSWORD)
    return subprocess.run(
        [sys.executable, "-m", "modelyard.cli.main", *arguments],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
    )


def test_an_admin_makes_a_project_and_reads_it_back_in_the_audit_log(team_server: TeamServer) -> None:
    made = _modelyard(team_server, "projects", "create", "cli-team", "--tokens-per-day", "50000")
    assert made.returncode == 0, made.stderr
    joined = _modelyard(team_server, "projects", "add-member", "cli-team", USERS[Role.MEMBER])
    assert joined.returncode == 0, joined.stderr
    listed = _modelyard(team_server, "audit", "--type", "project", "--object", "cli-team", "--json")
    assert listed.returncode == 0, listed.stderr
    events = json.loads(listed.stdout)
    assert [(event["actor"], event["action"]) for event in events] == [("admin", "join"), ("admin", "create")]
    table = _modelyard(team_server, "audit", "--object", "cli-team")
    assert "join" in table.stdout and "member=mia" in table.stdout
    projects = _modelyard(team_server, "projects", "list")
    assert "cli-team" in projects.stdout and "50000 tokens/day" in projects.stdout


def test_a_member_is_refused_the_audit_log_in_one_line_naming_the_role(team_server: TeamServer) -> None:
    refused = _modelyard(team_server, "audit", user=USERS[Role.MEMBER])
    assert refused.returncode == 1
    assert "role 'member' may not GET /api/v1/audit: it is for admin or operator" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_audit_help_names_every_filter() -> None:
    helped = subprocess.run(
        [sys.executable, "-m", "modelyard.cli.main", "audit", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
        timeout=120,
    )
    assert helped.returncode == 0, helped.stderr
    for option in ("--actor", "--action", "--type", "--object", "--project", "--since", "--until", "--limit"):
        assert option in helped.stdout
