"""The deployment page of an engine in a container (the Docker runtime): where it runs (runtime,
container, the gateway's address and the engine's own port), the model directory as the host and
as the container see it, verification run again from the page with its result as it comes back,
the refusal when no engine runs, and the log of an earlier start selected after a stop and
start."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from .conftest import (
    CONTAINER_BACKEND,
    NARROW,
    WIDE,
    Console,
    ConsoleServer,
    container_backend_yaml,
    new_console,
)
from .pages import horizontal_overflow_px, screenshot, wait_loaded

NAME = "boxed"


@pytest.fixture(scope="module")
def boxed(console_server: ConsoleServer, tiny_model_dir: Path) -> Iterator[str]:
    """The engine double deployed in a container, through the REST API."""
    if console_server.docker_problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"Docker is required under CI: {console_server.docker_problem}")
        pytest.skip(console_server.docker_problem)
    from modelyard.testing.container_image import SKELETON_TAG

    api = console_server.api
    imported = api.post("/api/v1/backends/import", content=container_backend_yaml(SKELETON_TAG))
    assert imported.status_code == 201, imported.text
    added = api.post("/api/v1/models", json={"name": "boxed-model", "path": str(tiny_model_dir)})
    assert added.status_code == 201, added.text
    created = api.post(
        "/api/v1/deployments",
        json={"model": "boxed-model", "name": NAME, "backend": CONTAINER_BACKEND, "skip_verification": True},
    )
    assert created.status_code == 201, created.text
    console_server.wait_running(NAME)
    yield NAME
    api.delete(f"/api/v1/deployments/{NAME}")


def test_the_page_shows_the_container_and_both_model_paths(
    browser: Browser, console_server: ConsoleServer, boxed: str, tiny_model_dir: Path
) -> None:
    instance = console_server.wait_running(boxed)["instances"][0]
    for viewport in (WIDE, NARROW):
        console = new_console(browser, console_server, viewport, signed_in=True)
        page = console.open(f"/deployments/{boxed}")
        card = page.locator(".instance").first
        expect(card.locator('[data-field="runtime"]')).to_have_text("docker")
        expect(card.locator('[data-field="engine"]')).to_have_text(
            re.compile(rf"^container modelyard-{boxed}-0-1-")
        )
        expect(card.locator('[data-field="engine_id"]')).to_have_text(instance["engine_id"])
        expect(card.locator('[data-field="address"]')).to_have_text(f"{instance['host']}:{instance['port']}")
        expect(card.locator('[data-field="engine_port"]')).to_contain_text(f"port {instance['engine_port']}")
        expect(card.locator('[data-field="host_path"]')).to_have_text(str(tiny_model_dir))
        expect(card.locator('[data-field="engine_path"]')).to_have_text(f"/models/{tiny_model_dir.name}")
        expect(card).to_contain_text("mounted read-only")
        wait_loaded(page)
        assert horizontal_overflow_px(page) <= 0
        if viewport is NARROW:
            screenshot(page, "deployment-docker", top=card.locator(".part").nth(1))
        console.context.close()
        assert not console.watch.problems, "\n".join(console.watch.problems)


def test_verification_runs_again_from_the_page_and_its_result_comes_back(
    console: Console, boxed: str
) -> None:
    before = console.server.wait_running(boxed)["instances"][0]["verified_at"]
    assert before is None  # deployed with skip_verification
    page = console.open(f"/deployments/{boxed}")
    card = page.locator(".instance").first
    expect(card.locator('[data-field="verified_at"]')).to_have_text("not run yet")
    page.get_by_role("button", name="Re-run verification").click()
    result = page.locator("#control-result")
    # The engine double has no tool-call parser: the suite finds it, and the page says so.
    expect(result).to_contain_text("Verification failed", timeout=60_000)
    expect(result).to_contain_text(
        "failed: verify.reasoning-separated, verify.tool-call; kept out of rotation"
    )
    shown = console.server.deployment(boxed)
    assert shown is not None
    instance = shown["instances"][0]
    assert instance["verified_at"] is not None and instance["state"] == "error"
    expect(card.locator('[data-field="verified_at"]')).to_contain_text("last run")
    for check in instance["verification"]:
        expect(card.locator(f'li[data-check="{check["check_id"]}"]')).to_contain_text(check["status"])
    expect(card.locator('li[data-check="verify.tool-call"]')).to_contain_text(
        "failed verify.tool-call: the model answered without calling the tool"
    )
    expect(page.locator("#state")).to_have_text("error")
    screenshot(page, "deployment-docker")


def test_the_log_of_an_earlier_start_is_selected(console: Console, boxed: str) -> None:
    page = console.open(f"/deployments/{boxed}")
    log = page.locator("#log")
    expect(log).to_contain_text(f"modelyard-{boxed}-0-1-", timeout=30_000)
    page.get_by_role("button", name="Stop").click()
    expect(page.locator("#state")).to_have_text("stopped", timeout=60_000)
    # No engine to verify: the API's 409 and its reason, on the page.
    console.watch.expect(409, rf"/api/v1/deployments/{boxed}/verify$")
    page.get_by_role("button", name="Re-run verification").click()
    expect(page.locator("#control-result [role=alert]")).to_contain_text("has no engine to verify")
    expect(page.locator("#control-result")).to_contain_text("Fix: verification runs on a started engine")
    page.get_by_role("button", name="Start").click()
    expect(page.locator("#state")).to_have_text("running", timeout=90_000)
    starts = page.get_by_label("Start", exact=True)
    expect(starts.locator("option")).to_have_count(2)
    expect(starts.locator("option").first).to_contain_text("start 2 (current)")
    # The current start's log follows the new container.
    expect(log).to_contain_text(f"modelyard-{boxed}-0-2-", timeout=30_000)
    starts.select_option("1")
    expect(log).to_have_attribute("data-start", "1")
    expect(log).to_have_attribute("data-loaded", "true")
    expect(log).to_contain_text(f"modelyard-{boxed}-0-1-")
    assert f"modelyard-{boxed}-0-2-" not in log.inner_text()
    expect(page.get_by_label("Follow")).to_be_disabled()
    starts.select_option("current")
    expect(log).to_contain_text(f"modelyard-{boxed}-0-2-")
