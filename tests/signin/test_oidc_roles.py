"""The role an account of the real provider gets here (``users.role``, from its ``groups`` claim),
what that role may then call, and the role following the provider at each sign-in."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from modelyard.testing.http_clients import shared_tls_context
from oidc_site.fixture import TestProvider

from .conftest import MEMBER_GROUP, OPERATOR_GROUP, SignInServer, sign_in_through_provider


@contextmanager
def _signed_in(server: SignInServer, username: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.served.url, timeout=60, verify=shared_tls_context()) as browser:
        landed = sign_in_through_provider(browser, username)
        assert landed.status_code == 200, landed.text
        yield browser


def test_a_member_of_the_provider_reads_deployments_but_not_models(signing_server: SignInServer) -> None:
    with _signed_in(signing_server, "dave") as browser:
        me = browser.get("/api/v1/users/me")
        deployments = browser.get("/api/v1/deployments")
        models = browser.get("/api/v1/models")
        console = browser.get("/deployments")
    assert me.status_code == 200 and me.json()["role"] == "member", me.text
    assert deployments.status_code == 200, deployments.text
    assert models.status_code == 403
    assert "role 'member' may not GET /api/v1/models" in models.json()["error"]["message"]
    assert console.status_code == 200 and "dave" in console.text


def test_an_operator_of_the_provider_reads_models_but_not_users(signing_server: SignInServer) -> None:
    with _signed_in(signing_server, "carol") as browser:
        me = browser.get("/api/v1/users/me")
        models = browser.get("/api/v1/models")
        audit = browser.get("/api/v1/audit", params={"actor": "carol"})
        users = browser.get("/api/v1/users")
    assert me.status_code == 200 and me.json()["role"] == "operator", me.text
    assert models.status_code == 200 and audit.status_code == 200, (models.text, audit.text)
    assert {"login"} <= {event["action"] for event in audit.json()["events"]}
    assert users.status_code == 403
    assert "role 'operator' may not GET /api/v1/users" in users.json()["error"]["message"]


def test_the_role_follows_the_provider_at_the_next_sign_in(
    signing_server: SignInServer, oidc_provider: TestProvider
) -> None:
    with _signed_in(signing_server, "erin") as browser:
        assert browser.get("/api/v1/models").status_code == 403
    oidc_provider.set_groups("erin", OPERATOR_GROUP)
    try:
        with _signed_in(signing_server, "erin") as browser:
            me = browser.get("/api/v1/users/me").json()
            models = browser.get("/api/v1/models")
    finally:
        oidc_provider.set_groups("erin", MEMBER_GROUP)
    assert me["role"] == "operator" and models.status_code == 200, models.text
    changes = signing_server.served.api(
        "GET", "/api/v1/audit", params={"object_name": "erin", "action": "role"}
    ).json()
    assert [change["details"]["from"] + " -> " + change["details"]["to"] for change in changes["events"]] == [
        "member -> operator"
    ]


def test_a_disabled_user_is_refused_though_the_provider_signs_it_in(signing_server: SignInServer) -> None:
    with _signed_in(signing_server, "dave") as browser:
        assert browser.get("/api/v1/users/me").status_code == 200
    disabled = signing_server.served.api("PATCH", "/api/v1/users/dave", json={"disabled": True})
    assert disabled.status_code == 200, disabled.text
    try:
        with httpx.Client(
            base_url=signing_server.served.url, timeout=60, verify=shared_tls_context()
        ) as browser:
            refused = sign_in_through_provider(browser, "dave")
            after = browser.get("/api/v1/users/me")
    finally:
        signing_server.served.api("PATCH", "/api/v1/users/dave", json={"disabled": False})
    assert refused.status_code == 403
    assert "user &#39;dave&#39; is disabled here" in refused.text
    assert after.status_code == 401
