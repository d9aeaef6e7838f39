"""Autoscale on a deployment's page, in Chromium: set from the form (the server's error beside the
field it names, nothing stored), shown with what the rule says, turned off; a member, who may not
change deployments, has no form."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from .conftest import WIDE, Console, ConsoleServer, PageWatch
from .pages import wait_loaded

NAME = "autoscaled"
PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="module")
def autoscaled(console_server: ConsoleServer, double_backend: str, tiny_model_dir: Path) -> Iterator[str]:
    api = console_server.api
    response = api.post("/api/v1/models", json={"name": "tiny-autoscaled", "path": str(tiny_model_dir)})
    assert response.status_code == 201, response.text
    body = {"model": "tiny-autoscaled", "name": NAME, "backend": double_backend, "skip_verification": True}
    response = api.post("/api/v1/deployments", json=body)
    assert response.status_code == 201, response.text
    console_server.wait_running(NAME)
    yield NAME
    api.delete(f"/api/v1/deployments/{NAME}")


def stored(console: Console) -> dict[str, Any] | None:
    autoscale: dict[str, Any] | None = console.server.api.get(f"/api/v1/deployments/{NAME}").json()[
        "autoscale"
    ]
    return autoscale


def fill(page: Page, minimum: str, maximum: str, target: str) -> None:
    page.get_by_label("Minimum replicas").fill(minimum)
    page.get_by_label("Maximum replicas").fill(maximum)
    page.get_by_label("Signal").select_option("waiting_per_replica")
    page.get_by_label("Target", exact=True).fill(target)


def test_autoscale_is_set_on_the_page_with_errors_beside_their_fields(
    console: Console, autoscaled: str
) -> None:
    console.watch.expect(400, f"/api/v1/deployments/{NAME}$")
    page = console.open(f"/deployments/{autoscaled}")
    wait_loaded(page)
    expect(page.get_by_role("heading", name="Autoscale", exact=True)).to_be_visible()
    expect(page.locator("#autoscale-now")).to_contain_text("Off: replicas are set by hand")

    fill(page, "5", "2", "2")
    page.get_by_role("button", name="Save autoscale").click()
    error = page.locator("#autoscale-min-error")
    expect(error).to_contain_text("min (5) is more than max (2): set min to at most max, or raise max")
    expect(page.get_by_label("Minimum replicas")).to_have_attribute("aria-invalid", "true")
    assert stored(console) is None

    page.get_by_label("Minimum replicas").fill("1")
    page.get_by_label("Schedule").fill("cron=0 25 * * *; duration=10h; min=1")
    page.get_by_role("button", name="Save autoscale").click()
    expect(page.locator("#autoscale-schedule-error")).to_contain_text(
        "cron '0 25 * * *' is not a valid cron expression"
    )
    expect(error).to_be_hidden()
    assert stored(console) is None

    page.get_by_label("Schedule").fill("cron=0 8 * * 1-5; duration=10h; min=2; timezone=Europe/Paris")
    page.get_by_label("Cool-down (s)").fill("90")
    page.get_by_role("button", name="Save autoscale").click()
    expect(page.locator("#autoscale-result")).to_contain_text("Autoscale saved.")
    expect(page.locator("#autoscale-now")).to_contain_text(
        "Autoscaled between 1 and 2 replicas on waiting_per_replica (target 2); 1 schedule window(s)."
    )
    autoscale = stored(console)
    assert autoscale is not None
    assert (autoscale["min"], autoscale["max"], autoscale["cooldown_s"]) == (1, 2, 90)
    assert autoscale["target"] == {"metric": "waiting_per_replica", "value": 2}
    assert autoscale["schedule"][0]["timezone"] == "Europe/Paris"
    # The autoscaler samples it: what its rule says is shown.
    expect(page.locator("#autoscale-rule")).to_contain_text("The rule says:", timeout=15_000)

    page.get_by_role("button", name="Turn autoscale off").click()
    expect(page.locator("#autoscale-result")).to_contain_text("Autoscale off")
    expect(page.locator("#autoscale-now")).to_contain_text("Off: replicas are set by hand")
    assert stored(console) is None


def test_a_member_sees_the_deployment_without_the_autoscale_form(
    browser: Browser, console_server: ConsoleServer, autoscaled: str
) -> None:
    api = console_server.api
    made = api.post("/api/v1/users", json={"username": "autoscale-member", "password": PASSWORD})
    assert made.status_code in (201, 409), made.text
    joined = api.put("/api/v1/projects/default/members/autoscale-member")
    assert joined.status_code == 200, joined.text
    context = browser.new_context(viewport=WIDE, base_url=console_server.url)  # type: ignore[arg-type]
    page = context.new_page()
    watch = PageWatch(origin=console_server.url)
    watch.attach(page)
    page.goto(f"{console_server.url}/login?next=/deployments/{autoscaled}")
    page.get_by_label("Username").fill("autoscale-member")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{console_server.url}/deployments/{autoscaled}")
    wait_loaded(page)
    expect(page.locator("#state")).to_have_text("running")
    expect(page.get_by_role("heading", name="Autoscale", exact=True)).to_have_count(0)
    expect(page.locator("#autoscale-form")).to_have_count(0)
    context.close()
    assert not watch.problems, "\n".join(watch.problems)
