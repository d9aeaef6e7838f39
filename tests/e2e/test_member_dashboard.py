"""A member's dashboard in Chromium: no GPU section (the GPUs are for operators and admins), and
nothing on the page is refused (the dashboard used to poll /api/v1/gpus and meet a 403)."""

from __future__ import annotations

from playwright.sync_api import Browser, expect

from .conftest import WIDE, ConsoleServer, PageWatch
from .pages import wait_loaded

PASSWORD = "correct horse battery staple"


def test_a_members_dashboard_shows_deployments_without_gpus_and_meets_no_refusal(
    browser: Browser, console_server: ConsoleServer
) -> None:
    member = {"username": "dashboard-member", "password": PASSWORD}
    made = console_server.api.post("/api/v1/users", json=member)
    assert made.status_code in (201, 409), made.text
    context = browser.new_context(viewport=WIDE, base_url=console_server.url)  # type: ignore[arg-type]
    page = context.new_page()
    watch = PageWatch(origin=console_server.url)
    watch.attach(page)
    page.goto(f"{console_server.url}/login?next=/")
    page.get_by_label("Username").fill("dashboard-member")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{console_server.url}/")
    wait_loaded(page)
    expect(page.get_by_role("heading", name="Deployments", level=2)).to_be_visible()
    expect(page.get_by_role("heading", name="GPUs")).to_have_count(0)
    expect(page.locator("#deployments")).not_to_contain_text("Loading")
    context.close()
    assert not watch.problems, "\n".join(watch.problems)
