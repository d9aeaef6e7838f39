"""The audit log in the console: an operator or admin reads who did what and narrows it down; a
member signed in is told, on the page itself, that the log is not for their role."""

from __future__ import annotations

from playwright.sync_api import Browser, expect

from .conftest import WIDE, Console, ConsoleServer, PageWatch
from .pages import screenshot, wait_loaded


def test_the_audit_page_shows_who_made_and_revoked_a_key(console: Console) -> None:
    api = console.server.api
    assert api.post("/api/v1/keys", json={"name": "audit-page-key"}).status_code == 201
    assert api.delete("/api/v1/keys/audit-page-key").status_code == 200
    page = console.open("/audit")
    wait_loaded(page)
    expect(page.get_by_role("heading", level=1)).to_have_text("Audit log")
    page.get_by_label("Name").fill("audit-page-key")
    page.get_by_role("button", name="Show").click()
    rows = page.locator("#events tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("revoke")
    expect(rows.nth(1)).to_contain_text("create")
    expect(rows.nth(1)).to_contain_text("admin")
    screenshot(page, "audit")
    page.get_by_label("What").select_option("deployment")
    page.get_by_role("button", name="Show").click()
    expect(page.locator("#events")).to_contain_text("Nothing recorded for this choice.")


def test_a_member_is_told_the_audit_log_is_not_for_their_role(
    browser: Browser, console_server: ConsoleServer
) -> None:
    made = console_server.api.post(
        "/api/v1/users", json={"username": "page-member", "password": "correct horse battery staple"}
    )
    assert made.status_code in (201, 409), made.text
    context = browser.new_context(viewport=WIDE, base_url=console_server.url)  # type: ignore[arg-type]
    page = context.new_page()
    watch = PageWatch(origin=console_server.url)
    watch.expect(403, "/audit$")
    watch.attach(page)
    page.goto(f"{console_server.url}/login?next=/audit")
    page.get_by_label("Username").fill("page-member")
    page.get_by_label("Password").fill("correct horse battery staple")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{console_server.url}/audit")
    expect(page.get_by_role("heading", level=1)).to_have_text("Not allowed")
    expect(page.get_by_role("alert")).to_contain_text(
        "role 'member' may not GET /audit: it is for admin or operator"
    )
    navigation = page.get_by_role("navigation", name="Sections")
    expect(navigation.get_by_role("link", name="Audit log")).to_have_count(0)
    expect(navigation.get_by_role("link", name="Playground")).to_be_visible()
    context.close()
    assert not watch.problems, "\n".join(watch.problems)
