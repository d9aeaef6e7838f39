"""Signing in through a real OpenID Connect provider (django-oidc-provider): the code flow with
PKCE and discovery, users made at their first sign-in, roles from the ``groups`` claim, local
accounts beside it, and the errors of a misconfigured provider on the page and in the log."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from dataclasses import asdict
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from authlib.oauth2.rfc7636 import create_s256_code_challenge

from gateway.served import ServedPlatform
from modelyard.errors import ProviderUnreachable
from modelyard.server.oidc.provider import OidcProvider, PendingSignIn
from modelyard.server.oidc.settings import OidcSettings
from modelyard.store.secret_box import SecretBox
from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.ports import reserved_port
from oidc_site.fixture import TestProvider

from .conftest import SignInServer, sign_in_through_provider, start_signing_server, through_the_provider


def test_an_admin_of_the_provider_signs_in_and_the_session_opens_the_api(
    signing_server: SignInServer,
) -> None:
    with httpx.Client(base_url=signing_server.served.url, timeout=60, verify=shared_tls_context()) as browser:
        started = browser.get("/login/oidc")
        query = parse_qs(urlsplit(started.headers["location"]).query)
        assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) == 43
        assert query["client_id"] == [signing_server.client_id] and "nonce" in query
        browser.cookies.clear()
        landed = sign_in_through_provider(browser, "alice")
        assert landed.status_code == 200, landed.text
        assert 'url=/deployments"' in landed.text
        system = browser.get("/api/v1/system")
        console = browser.get("/deployments")
    assert system.status_code == 200, system.text
    assert console.status_code == 200 and "alice" in console.text
    sessions = signing_server.served.api("GET", "/api/v1/sessions", params={"username": "alice"}).json()
    assert [session["method"] for session in sessions] == ["oidc"]


def test_the_second_sign_in_is_the_same_user(signing_server: SignInServer) -> None:
    for _ in range(2):
        with httpx.Client(
            base_url=signing_server.served.url, timeout=60, verify=shared_tls_context()
        ) as browser:
            assert sign_in_through_provider(browser, "alice").status_code == 200
    listed = signing_server.served.api("GET", "/api/v1/sessions").json()
    assert {session["username"] for session in listed} == {"alice"}  # never alice-2


def test_an_account_whose_groups_give_no_role_is_refused_on_the_sign_in_page(
    signing_server: SignInServer,
) -> None:
    with httpx.Client(base_url=signing_server.served.url, timeout=60, verify=shared_tls_context()) as browser:
        refused = sign_in_through_provider(browser, "bob")
        assert browser.get("/api/v1/system").status_code == 401
    assert refused.status_code == 403
    assert "its &#39;groups&#39; claim (staff) matches no configured value" in refused.text
    assert "MODELYARD_OIDC_ADMIN_VALUES" in refused.text
    assert "single sign-on failed at the callback" in signing_server.served.log_tail()


def test_a_callback_with_another_state_is_refused(signing_server: SignInServer) -> None:
    with httpx.Client(base_url=signing_server.served.url, timeout=60, verify=shared_tls_context()) as browser:
        browser.get("/login/oidc")
        forged = browser.get("/login/oidc/callback", params={"code": "stolen", "state": "not-the-one"})
        no_cookie = httpx.get(
            f"{signing_server.served.url}/login/oidc/callback",
            params={"code": "x", "state": "y"},
            verify=shared_tls_context(),
        )
    assert forged.status_code == 400
    assert "does not carry the state this browser" in forged.text
    assert no_cookie.status_code == 400 and "no sign-in was started in this browser" in no_cookie.text


def test_an_id_token_with_another_nonce_is_refused(
    oidc_provider: TestProvider, signing_server: SignInServer
) -> None:
    """The browser's sign-in (its sealed cookie, made here with the server's own key) sent one
    nonce; the provider was asked, with the same state and PKCE verifier, for another."""
    served = signing_server.served
    verifier = secrets.token_urlsafe(48)
    pending = PendingSignIn(
        state=secrets.token_urlsafe(32),
        nonce="the-nonce-this-browser-sent",
        code_verifier=verifier,
        next_path="/",
        started_at=time.time(),
    )
    authorize = f"{oidc_provider.url}/authorize?" + urlencode(
        {
            "response_type": "code",
            "client_id": signing_server.client_id,
            "redirect_uri": f"{served.url}/login/oidc/callback",
            "scope": "openid groups",
            "state": pending.state,
            "nonce": "another-nonce",
            "code_challenge": create_s256_code_challenge(verifier),
            "code_challenge_method": "S256",
        }
    )
    sealed = SecretBox.for_data_dir(served.data_dir).seal(json.dumps(asdict(pending)))
    with httpx.Client(base_url=served.url, timeout=60, verify=shared_tls_context()) as browser:
        callback = through_the_provider(browser, authorize, "alice")
        browser.cookies.set("modelyard_oidc", sealed, path="/login/oidc")
        refused = browser.get(callback)
        assert browser.get("/api/v1/system").status_code == 401
    assert refused.status_code == 400
    assert "the ID token&#39;s nonce is not the one this sign-in sent" in refused.text


def test_the_local_admin_still_signs_in_with_a_password(signing_server: SignInServer) -> None:
    served = signing_server.served
    with httpx.Client(base_url=served.url, timeout=60, verify=shared_tls_context()) as browser:
        form = browser.get("/login")
        assert "Sign in with Test provider" in form.text
        token = form.text.split('name="login_token" value="', 1)[1].split('"', 1)[0]
        signed_in = browser.post(
            "/login", data={"login_token": token, "username": "admin", "password": served.password}
        )
        assert signed_in.status_code == 303
        assert browser.get("/api/v1/system").status_code == 200


def test_a_wrong_client_secret_is_named_on_the_page_and_in_the_log_without_the_secret(
    oidc_provider: TestProvider, tmp_path: Path
) -> None:
    wrong = secrets.token_urlsafe(24)
    server = start_signing_server(
        oidc_provider,
        tmp_path,
        registered_secret=secrets.token_urlsafe(24),
        configured_secret=wrong,
        workers=0,
    )
    try:
        with httpx.Client(base_url=server.served.url, timeout=60, verify=shared_tls_context()) as browser:
            refused = sign_in_through_provider(browser, "alice")
        log = server.served.log_tail()
    finally:
        server.served.stop()
    assert refused.status_code == 502
    assert "the provider refused this server&#39;s client credentials (invalid_client" in refused.text
    assert "MODELYARD_OIDC_CLIENT_SECRET_FILE" in refused.text
    assert "refused this server's client credentials" in log
    assert wrong not in log and wrong not in refused.text


def test_an_unreachable_provider_is_named_on_the_sign_in_page_and_in_the_log(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{reserved_port()}"
    secret_file = tmp_path / "client-secret"
    secret_file.write_text("never-shown-secret\n")
    served = ServedPlatform(tmp_path / "data", gateway_workers=0)
    served.environment = {
        "MODELYARD_OIDC_ISSUER": closed,
        "MODELYARD_OIDC_CLIENT_ID": "modelyard",
        "MODELYARD_OIDC_CLIENT_SECRET_FILE": str(secret_file),
    }
    served.start()
    try:
        with httpx.Client(base_url=served.url, timeout=60, verify=shared_tls_context()) as browser:
            page = browser.get("/login/oidc")
        log = served.log_tail()
    finally:
        served.stop()
    expected = f"discovery document at {closed}/.well-known/openid-configuration cannot be reached"
    assert page.status_code == 502 and expected in page.text
    assert 'name="password"' in page.text  # the local sign-in is still there
    assert expected in log and "never-shown-secret" not in log


def test_an_unreachable_discovery_document_is_named() -> None:
    closed = f"http://127.0.0.1:{reserved_port()}"
    provider = OidcProvider(OidcSettings(issuer=closed, client_id="modelyard", client_secret="not-shown"))
    with pytest.raises(ProviderUnreachable) as raised:
        asyncio.run(provider.start(f"{closed}/login/oidc/callback"))
    assert f"discovery document at {closed}/.well-known/openid-configuration cannot be reached" in str(
        raised.value
    )
    assert "not-shown" not in str(raised.value) and "not-shown" not in repr(provider.settings)
