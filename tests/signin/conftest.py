"""A real ``modelyard serve`` (two gateway workers) signing in through the session's real
OpenID Connect provider, and what a browser does on the way, step by step over HTTP."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin

import httpx
import pytest

from gateway.served import ServedPlatform
from oidc_site.fixture import PROVIDER_PASSWORD, TestProvider

ADMIN_GROUP = "modelyard-admins"
OPERATOR_GROUP = "modelyard-operators"
MEMBER_GROUP = "modelyard-members"
# Provider groups that make an account a member of a project here (MODELYARD_OIDC_PROJECTS);
# ``operations`` is never made, so its pair is skipped.
RESEARCH_GROUP = "ml-research"
RESEARCH_PROJECT = "research"


def oidc_environment(provider: TestProvider, client_id: str, secret_file: Path) -> dict[str, str]:
    return {
        "MODELYARD_OIDC_ISSUER": provider.url,
        "MODELYARD_OIDC_CLIENT_ID": client_id,
        "MODELYARD_OIDC_CLIENT_SECRET_FILE": str(secret_file),
        "MODELYARD_OIDC_SCOPES": "openid profile email groups",
        "MODELYARD_OIDC_NAME": "Test provider",
        "MODELYARD_OIDC_ADMIN_VALUES": ADMIN_GROUP,
        "MODELYARD_OIDC_OPERATOR_VALUES": OPERATOR_GROUP,
        "MODELYARD_OIDC_MEMBER_VALUES": MEMBER_GROUP,
        "MODELYARD_OIDC_PROJECTS": f"{RESEARCH_GROUP}={RESEARCH_PROJECT},ml-ops=operations",
    }


@dataclass
class SignInServer:
    served: ServedPlatform
    client_id: str
    client_secret: str


def start_signing_server(
    provider: TestProvider, folder: Path, *, registered_secret: str, configured_secret: str, workers: int = 2
) -> SignInServer:
    client_id = f"modelyard-{secrets.token_hex(4)}"
    served = ServedPlatform(folder / "data", gateway_workers=workers)
    provider.add_client(client_id, registered_secret, f"{served.url}/login/oidc/callback")
    secret_file = folder / "client-secret"
    secret_file.write_text(configured_secret + "\n")
    served.environment = oidc_environment(provider, client_id, secret_file)
    served.start()
    return SignInServer(served, client_id, configured_secret)


@pytest.fixture(scope="module")
def signing_server(
    oidc_provider: TestProvider, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SignInServer]:
    secret = secrets.token_urlsafe(24)
    server = start_signing_server(
        oidc_provider, tmp_path_factory.mktemp("signing"), registered_secret=secret, configured_secret=secret
    )
    try:
        yield server
    finally:
        server.served.stop()


def _csrf_token(page: str) -> str:
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert found, page[:500]
    return found.group(1)


def through_the_provider(
    client: httpx.Client, authorize: str, username: str, password: str = PROVIDER_PASSWORD
) -> str:
    """What a browser does at the provider from ``authorize``: its login form, then the redirect
    back; the callback URL (with the code) it is sent to."""
    at_provider = client.get(authorize)
    assert at_provider.status_code == 302, at_provider.text  # to the provider's login form
    login_url = urljoin(authorize, at_provider.headers["location"])
    form = client.get(login_url)
    posted = client.post(
        login_url,
        data={"csrfmiddlewaretoken": _csrf_token(form.text), "username": username, "password": password},
    )
    assert posted.status_code == 302, posted.text[:500]
    authorized = client.get(urljoin(login_url, posted.headers["location"]))
    assert authorized.status_code == 302, authorized.text[:500]
    callback: str = authorized.headers["location"]
    return callback


def sign_in_through_provider(
    client: httpx.Client, username: str, password: str = PROVIDER_PASSWORD
) -> httpx.Response:
    """What a browser does from modelyard's "Sign in with ..." to the callback; the callback's answer.

    ``client`` is modelyard's (its base URL); it keeps every cookie, as a browser would.
    """
    started = client.get("/login/oidc", params={"next": "/deployments"})
    assert started.status_code == 303, started.text
    return client.get(through_the_provider(client, started.headers["location"], username, password))
