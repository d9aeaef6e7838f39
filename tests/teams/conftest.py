"""A real ``modelyard serve`` (a child process, no demo) with one user of each role, for the
tests of roles, projects and the audit log over real HTTP on loopback.

Users: ``admin`` (made at first start), ``olga`` (operator) and ``mia`` (member of project
``research``, which the fixture makes). Each gets an HTTP Basic client, and ``console_client``
signs a user in through the real ``/login`` form for the console's pages.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from modelyard.services.roles import Role
from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.serve_process import ServeProcess

PASSWORD = "correct horse battery staple"
USERS = {Role.ADMIN: "admin", Role.OPERATOR: "olga", Role.MEMBER: "mia"}
MEMBER_PROJECT = "research"
_LOGIN_TOKEN = re.compile(r'name="login_token" value="([^"]+)"')


@dataclass
class TeamServer:
    server: ServeProcess

    @property
    def url(self) -> str:
        return self.server.url

    def client(self, role: Role) -> httpx.Client:
        password = self.server.password() if role == Role.ADMIN else PASSWORD
        return httpx.Client(
            base_url=self.url,
            auth=(USERS[role], password),
            timeout=30.0,
            trust_env=False,
            verify=shared_tls_context(),
        )

    def anonymous(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30.0, trust_env=False, verify=shared_tls_context())

    def console_client(self, role: Role) -> httpx.Client:
        """A client holding the console's session cookie of ``role``'s user (signed in by the form)."""
        client = self.anonymous()
        form = client.get("/login")
        match = _LOGIN_TOKEN.search(form.text)
        assert match is not None, form.text
        password = self.server.password() if role == Role.ADMIN else PASSWORD
        answer = client.post(
            "/login", data={"username": USERS[role], "password": password, "login_token": match.group(1)}
        )
        assert answer.status_code == 303, answer.text
        return client


@pytest.fixture(scope="session")
def team_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TeamServer]:
    data_dir: Path = tmp_path_factory.mktemp("teams") / "data"
    server = ServeProcess(data_dir=data_dir)
    server.start("--no-demo")
    try:
        server.wait_until_answering()
        team = TeamServer(server)
        with team.client(Role.ADMIN) as admin:
            for role in (Role.OPERATOR, Role.MEMBER):
                made = admin.post(
                    "/api/v1/users", json={"username": USERS[role], "password": PASSWORD, "role": role}
                )
                assert made.status_code == 201, made.text
            made = admin.post("/api/v1/projects", json={"name": MEMBER_PROJECT})
            assert made.status_code == 201, made.text
            joined = admin.put(f"/api/v1/projects/{MEMBER_PROJECT}/members/{USERS[Role.MEMBER]}")
            assert joined.status_code == 200, joined.text
        yield team
    finally:
        server.stop()
