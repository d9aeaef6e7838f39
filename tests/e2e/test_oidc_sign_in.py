"""In Chromium: signing in through the real OpenID Connect provider (django-oidc-provider) lands
on the console page asked for; an account the claims give no role sees why on the sign-in page.

The server is a real ``modelyard serve`` with two gateway workers configured for the provider
(``tests/signin/conftest.py``); the provider's login form is filled in as a person would.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from oidc_site.fixture import PROVIDER_PASSWORD, TestProvider
from signin.conftest import SignInServer, start_signing_server

from .conftest import WIDE, PageWatch


@pytest.fixture(scope="module")
def provider_server(
    oidc_provider: TestProvider, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SignInServer]:
    secret = secrets.token_urlsafe(24)
    server = start_signing_server(
        oidc_provider,
        tmp_path_factory.mktemp("oidc-browser"),
        registered_secret=secret,
        configured_secret=secret,
    )
    try:
        yield server
    finally:
        server.served.stop()


def _through_the_provider(page: Page, provider: TestProvider, username: str) -> None:
    page.get_by_role("link", name="Sign in with Test provider").click()
    page.wait_for_url(f"{provider.url}/accounts/login/**")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PROVIDER_PASSWORD)
    page.get_by_role("button", name="Sign in to the provider").click()


def test_signing_in_through_the_provider_lands_on_the_console(
    browser: Browser, oidc_provider: TestProvider, provider_server: SignInServer
) -> None:
    url = provider_server.served.url
    context = browser.new_context(viewport=WIDE)  # type: ignore[arg-type]
    context.set_default_timeout(30_000)
    page = context.new_page()
    watch = PageWatch(origin="http://127.0.0.1:")  # this server and the provider, both on loopback
    watch.attach(page)
    try:
        page.goto(f"{url}/deployments")
        page.wait_for_url(f"{url}/login?next=/deployments")
        _through_the_provider(page, oidc_provider, "alice")
        page.wait_for_url(f"{url}/deployments")
        expect(page.get_by_role("heading", name="Deployments")).to_be_visible()
        expect(page.locator("body")).to_contain_text("alice")
        page.goto(f"{url}/keys")  # the session holds on the next page too
        expect(page).to_have_url(f"{url}/keys")
    finally:
        context.close()
    assert not watch.problems, "\n".join(watch.problems)


def test_an_account_without_a_role_reads_why_on_the_sign_in_page(
    browser: Browser, oidc_provider: TestProvider, provider_server: SignInServer
) -> None:
    url = provider_server.served.url
    context = browser.new_context(viewport=WIDE)  # type: ignore[arg-type]
    context.set_default_timeout(30_000)
    page = context.new_page()
    try:
        page.goto(f"{url}/login")
        _through_the_provider(page, oidc_provider, "bob")
        page.wait_for_url(f"{url}/login/oidc/callback**")
        alert = page.get_by_role("alert")
        expect(alert).to_contain_text("the provider's account has no role here")
        expect(alert).to_contain_text("(staff)")
        expect(page.get_by_label("Password")).to_be_visible()  # the local sign-in stays offered
    finally:
        context.close()
