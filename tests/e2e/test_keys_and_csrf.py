"""API keys made in the browser work with the openai client until revoked there; a write made
with the console's session but without its CSRF token is refused."""

from __future__ import annotations

import re

import httpx
import openai
import pytest
from playwright.sync_api import expect

from modelyard.testing.http_clients import shared_tls_context

from .conftest import Console
from .pages import screenshot


def test_a_key_created_in_the_browser_works_until_revoked(console: Console, double_deployment: str) -> None:
    page = console.open("/keys")
    page.get_by_label("Name").fill("browser-key")
    page.get_by_label("Allowed deployments").select_option(double_deployment)
    page.get_by_role("button", name="Create").click()
    key = page.locator("#new-key").inner_text()
    assert len(key) >= 20, key
    expect(page.locator("#keys")).to_contain_text("browser-key")

    client = openai.OpenAI(base_url=f"{console.server.url}/v1", api_key=key, max_retries=0)
    answer = client.chat.completions.create(
        model=double_deployment, messages=[{"role": "user", "content": "hello"}], max_tokens=4
    )
    assert answer.choices[0].message.content

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Revoke key browser-key").click()
    expect(page.locator("#key-result")).to_contain_text("Key browser-key revoked")
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(
            model=double_deployment, messages=[{"role": "user", "content": "hello"}], max_tokens=4
        )


def test_a_write_without_the_csrf_token_is_refused(console: Console) -> None:
    page = console.open("/keys")
    cookies = {cookie["name"]: cookie["value"] for cookie in console.context.cookies()}
    assert "modelyard_session" in cookies
    session_cookie = next(c for c in console.context.cookies() if c["name"] == "modelyard_session")
    assert session_cookie["httpOnly"] and session_cookie["sameSite"] == "Strict"
    token = page.locator('meta[name="csrf-token"]').get_attribute("content")
    assert token
    session = {"modelyard_session": cookies["modelyard_session"]}
    with httpx.Client(base_url=console.server.url, cookies=session, verify=shared_tls_context()) as raw:
        refused = raw.post("/api/v1/keys", json={"name": "no-token"})
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "csrf_refused"
        wrong = raw.post("/api/v1/keys", json={"name": "no-token"}, headers={"X-CSRF-Token": "guess"})
        assert wrong.status_code == 403
        assert raw.get("/api/v1/keys").status_code == 200  # reading needs no token
        accepted = raw.post("/api/v1/keys", json={"name": "with-token"}, headers={"X-CSRF-Token": token})
        assert accepted.status_code == 201, accepted.text
        signed_out = raw.post("/logout", data={"csrf_token": ""}, follow_redirects=False)
        assert signed_out.status_code == 403
    names = [key["name"] for key in console.server.api.get("/api/v1/keys").json()]
    assert "no-token" not in names and "with-token" in names


def test_wrong_password_is_refused_and_sign_out_ends_the_session(anonymous_console: Console) -> None:
    page = anonymous_console.open("/login")
    anonymous_console.watch.expect(401, r"/login$")
    page.get_by_label("Password").fill("not-the-password")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("wrong username or password")
    page.get_by_label("Password").fill(anonymous_console.server.password)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Dashboard")
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(f"{anonymous_console.server.url}/login")
    page.goto(f"{anonymous_console.server.url}/keys")
    expect(page).to_have_url(f"{anonymous_console.server.url}/login?next=/keys")


def test_a_revoked_keys_time_is_in_a_labelled_column(console: Console) -> None:
    created = console.server.api.post("/api/v1/keys", json={"name": "revoked-soon"})
    assert created.status_code == 201, created.text
    assert console.server.api.delete("/api/v1/keys/revoked-soon").status_code in (200, 204)
    page = console.open("/keys")
    table = page.locator("#keys table")
    row = table.locator("tbody tr", has_text="revoked-soon")
    expect(row).to_be_visible()  # the table is drawn from the API's answer: read it once it is there
    headers = [text.strip() for text in table.locator("thead th").all_inner_texts()]
    assert all(headers), f"every column has a header: {headers}"
    cells = dict(zip(headers, [text.strip() for text in row.locator("td").all_inner_texts()], strict=True))
    assert re.fullmatch(r"revoked \d.*\d.*", cells["state"]), cells
    assert cells["action"] == "–", cells
    screenshot(page, "keys-revoked")
