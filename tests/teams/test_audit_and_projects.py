"""The audit log and projects as users meet them over real HTTP: every change names who made it,
to what, when, and never a secret; a member sees and changes only what their projects own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx

from modelyard.services.roles import Role
from teams.conftest import MEMBER_PROJECT, USERS, TeamServer


def _events(client: httpx.Client, **filters: str) -> list[dict[str, object]]:
    answer = client.get("/api/v1/audit", params=filters)
    assert answer.status_code == 200, answer.text
    events: list[dict[str, object]] = answer.json()["events"]
    return events


def test_key_changes_are_audited_by_who_made_them_and_never_hold_the_key(team_server: TeamServer) -> None:
    member = USERS[Role.MEMBER]
    with team_server.client(Role.MEMBER) as client:
        made = client.post("/api/v1/keys", json={"name": "mia-notebook", "token_quota": 5000})
        assert made.status_code == 201, made.text
        secret = made.json()["key"]
        assert made.json()["project"] == MEMBER_PROJECT and made.json()["owner"] == member
        rotated = client.post("/api/v1/keys/mia-notebook/rotate")
        assert rotated.status_code == 200, rotated.text
        assert client.delete("/api/v1/keys/mia-notebook").status_code == 200
    with team_server.client(Role.OPERATOR) as operator:
        events = _events(operator, object_type="key", object_name="mia-notebook")
    assert [(event["actor"], event["action"], event["project"]) for event in events] == [
        (member, "revoke", MEMBER_PROJECT),
        (member, "rotate", MEMBER_PROJECT),
        (member, "create", MEMBER_PROJECT),
    ]
    created = events[-1]
    assert created["details"] == {
        "allowed_deployments": None,
        "limits": {
            "requests_per_minute": None,
            "tokens_per_minute": None,
            "max_concurrent_requests": None,
            "token_quota": 5000,
            "quota_period": "month",
        },
    }
    shown = str(events)
    assert secret not in shown and rotated.json()["key"] not in shown


def test_user_and_role_changes_and_sign_ins_are_audited_without_passwords(team_server: TeamServer) -> None:
    password = "another long enough password"
    with team_server.client(Role.ADMIN) as admin:
        assert admin.post("/api/v1/users", json={"username": "ravi", "password": password}).status_code == 201
        assert admin.patch("/api/v1/users/ravi", json={"role": "operator"}).status_code == 200
        reset = admin.patch("/api/v1/users/ravi", json={"password": password + "!"})
        assert reset.status_code == 200, reset.text
        team_server.console_client(Role.OPERATOR).close()  # a sign-in through the form
        ravi = _events(admin, object_type="user", object_name="ravi")
        sign_ins = _events(admin, action="login", actor=USERS[Role.OPERATOR])
    assert [(event["actor"], event["action"]) for event in ravi] == [
        ("admin", "update"),
        ("admin", "role"),
        ("admin", "create"),
    ]
    assert ravi[0]["details"] == {"password_reset": True}
    assert ravi[1]["details"] == {"from": "member", "to": "operator"}
    assert password not in str(ravi)
    assert sign_ins and sign_ins[0]["object_type"] == "session"
    assert sign_ins[0]["details"] == {"method": "password", "address": "127.0.0.1"}


def test_the_audit_log_filters_by_time_and_refuses_a_bad_filter_with_the_allowed_values(
    team_server: TeamServer,
) -> None:
    with team_server.client(Role.ADMIN) as admin:
        assert admin.post("/api/v1/projects", json={"name": "timing"}).status_code == 201
        later = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
        earlier = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
        assert _events(admin, object_name="timing", since=later) == []
        assert [event["action"] for event in _events(admin, object_name="timing", since=earlier)] == [
            "create"
        ]
        bad = admin.get("/api/v1/audit", params={"object_type": "planet"})
    assert bad.status_code == 400
    assert (
        "object type 'planet' is not one of deployment, key, user, project, session"
        in bad.json()["error"]["message"]
    )


def test_a_member_sees_only_their_projects_keys_and_cannot_revoke_another_users(
    team_server: TeamServer,
) -> None:
    with team_server.client(Role.ADMIN) as admin:
        assert admin.post("/api/v1/keys", json={"name": "ops-key"}).status_code == 201  # project default
        made = admin.post("/api/v1/keys", json={"name": "research-shared", "project": MEMBER_PROJECT})
        assert made.status_code == 201, made.text
    with team_server.client(Role.MEMBER) as member:
        names = {key["name"] for key in member.get("/api/v1/keys").json()}
        outside = member.delete("/api/v1/keys/ops-key")
        not_theirs = member.delete("/api/v1/keys/research-shared")
        elsewhere = member.post("/api/v1/keys", json={"name": "sneaky", "project": "default"})
        projects = [project["name"] for project in member.get("/api/v1/projects").json()]
    assert "ops-key" not in names and "research-shared" in names
    assert outside.status_code == 404
    assert not_theirs.status_code == 403
    assert "belongs to another user of project 'research'" in not_theirs.json()["error"]["message"]
    assert (
        elsewhere.status_code == 404 and "no project named 'default'" in elsewhere.json()["error"]["message"]
    )
    assert projects == [MEMBER_PROJECT]


def test_the_last_admin_cannot_be_demoted_and_a_project_with_keys_cannot_be_removed(
    team_server: TeamServer,
) -> None:
    with team_server.client(Role.ADMIN) as admin:
        demoted = admin.patch("/api/v1/users/admin", json={"role": "member"})
        assert admin.post("/api/v1/projects", json={"name": "busy"}).status_code == 201
        assert admin.post("/api/v1/keys", json={"name": "busy-key", "project": "busy"}).status_code == 201
        removed = admin.delete("/api/v1/projects/busy")
        default = admin.delete("/api/v1/projects/default")
    assert demoted.status_code == 409 and "last enabled admin" in demoted.json()["error"]["message"]
    assert removed.status_code == 409 and "still owns 1 keys" in removed.json()["error"]["message"]
    assert default.status_code == 409 and "cannot be removed" in default.json()["error"]["message"]
