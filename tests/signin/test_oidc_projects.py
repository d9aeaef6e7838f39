"""The projects an account of the real provider is a member of here, from its ``groups`` claim
(``MODELYARD_OIDC_PROJECTS``: ``ml-research=research``): joined at a sign-in whose claims give
the project, left at one whose claims no longer do, each recorded in the audit log; a project the
mapping does not name keeps the membership an admin gave, and a mapped project that does not
exist (``operations``) is skipped without refusing the sign-in."""

from __future__ import annotations

import httpx

from modelyard.testing.http_clients import shared_tls_context
from oidc_site.fixture import TestProvider

from .conftest import MEMBER_GROUP, RESEARCH_GROUP, RESEARCH_PROJECT, SignInServer, sign_in_through_provider


def _projects_after_sign_in(server: SignInServer, username: str) -> list[str]:
    with httpx.Client(base_url=server.served.url, timeout=60, verify=shared_tls_context()) as browser:
        landed = sign_in_through_provider(browser, username)
        assert landed.status_code == 200, landed.text
        me = browser.get("/api/v1/users/me")
    assert me.status_code == 200, me.text
    projects: list[str] = me.json()["projects"]
    return projects


def test_the_provider_groups_decide_the_mapped_projects_and_leave_the_others(
    signing_server: SignInServer, oidc_provider: TestProvider
) -> None:
    served = signing_server.served
    for project in (RESEARCH_PROJECT, "sandbox"):
        made = served.api("POST", "/api/v1/projects", json={"name": project})
        assert made.status_code == 201, made.text
    assert _projects_after_sign_in(signing_server, "dave") == []  # made now, in no mapped group
    given = served.api("PUT", "/api/v1/projects/sandbox/members/dave")
    assert given.status_code == 200, given.text
    oidc_provider.set_groups("dave", MEMBER_GROUP, RESEARCH_GROUP, "ml-ops")
    try:
        assert _projects_after_sign_in(signing_server, "dave") == [RESEARCH_PROJECT, "sandbox"]
    finally:
        oidc_provider.set_groups("dave", MEMBER_GROUP)
    assert _projects_after_sign_in(signing_server, "dave") == ["sandbox"]
    events = served.api("GET", "/api/v1/audit", params={"object_name": RESEARCH_PROJECT}).json()["events"]
    by_claims = [
        (event["action"], event["actor"], event["details"]["by"])
        for event in events
        if event["details"].get("member") == "dave"
    ]
    assert by_claims == [
        ("leave", "dave", "the provider's claims"),
        ("join", "dave", "the provider's claims"),
    ]
