"""The deployment page as a reader meets it: a loading state until the first answer, the engine's
flags as the command line they are (``--max-model-len 2048``), the environment as KEY=value,
placement in words (worker, GPUs, memory booked) instead of JSON, and the log's start menu with
the log's size as it is now, not as it was when the page opened."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Route, expect

from .conftest import NARROW, Console, ConsoleServer, new_console
from .pages import screenshot, wait_loaded

NAME = "detailed"


def format_bytes(size: int) -> str:
    """As the console's formatBytes writes a size."""
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    value, unit = float(size), 0
    while value >= 1024 and unit < len(units) - 1:
        value /= 1024
        unit += 1
    return f"{value:.{1 if unit else 0}f} {units[unit]}"


@pytest.fixture(scope="module")
def detailed(console_server: ConsoleServer, double_backend: str, tiny_model_dir: Path) -> Iterator[str]:
    api = console_server.api
    response = api.post("/api/v1/models", json={"name": "tiny-detailed", "path": str(tiny_model_dir)})
    assert response.status_code == 201, response.text
    response = api.post(
        "/api/v1/deployments",
        json={
            "model": "tiny-detailed",
            "name": NAME,
            "backend": double_backend,
            "backend_parameters": ["--max-model-len", "2048", "--enforce-eager"],
            "env": {"DOUBLE_GREETING": "hello there"},
            "skip_verification": True,
        },
    )
    assert response.status_code == 201, response.text
    console_server.wait_running(NAME)
    yield NAME
    api.delete(f"/api/v1/deployments/{NAME}")


def test_the_page_says_it_is_loading_until_the_deployment_is_read(console: Console, detailed: str) -> None:
    held: list[Route] = []
    page = console.page
    page.route(re.compile(rf"/api/v1/deployments/{detailed}$"), lambda route: held.append(route))
    page.goto(f"{console.server.url}/deployments/{detailed}")
    expect(page.locator("#instances")).to_have_text("Loading…")
    expect(page.locator("#events")).to_have_text("Loading…")
    expect(page.locator("#state")).to_have_text("loading")
    expect(page.locator("main")).to_have_attribute("aria-busy", "true")
    screenshot(page, "deployment-loading")
    assert held, "the page asked for the deployment"
    for route in held:
        route.continue_()
    page.unroute(re.compile(rf"/api/v1/deployments/{detailed}$"))
    expect(page.locator("#state")).to_have_text("running")
    expect(page.locator("main")).not_to_have_attribute("aria-busy", "true")
    wait_loaded(page)


def test_flags_environment_and_placement_read_as_text(
    console: Console, browser: Browser, detailed: str
) -> None:
    page = console.open(f"/deployments/{detailed}")
    expect(page.locator("#state")).to_have_text("running")
    expect(page.locator('#summary [data-field="backend_parameters"]')).to_have_text(
        "--max-model-len 2048 --enforce-eager"
    )
    expect(page.locator('#summary [data-field="env"]')).to_have_text("DOUBLE_GREETING=hello there")
    expect(page.locator('#summary [data-field="placement_rule"]')).to_have_text(
        "any ready worker; no GPU (CPU)"
    )
    card = page.locator(".card.instance").first
    expect(card.locator('[data-field="placement"]')).to_have_text(
        re.compile(r"^worker \S+ \(127\.0\.0\.1\), no GPU \(CPU\)$")
    )
    expect(card.locator('[data-field="memory_booked"]')).to_have_text("none (CPU)")
    assert "{" not in (page.locator("#summary").inner_text() + card.inner_text()), "no JSON on the page"
    wait_loaded(page)
    screenshot(page, "deployment-settings", top=page.locator("#settings-heading"))
    narrow = new_console(browser, console.server, NARROW, signed_in=True)
    narrow.page.goto(f"{console.server.url}/deployments/{detailed}")
    expect(narrow.page.locator("#state")).to_have_text("running")
    wait_loaded(narrow.page)
    screenshot(narrow.page, "deployment-settings", top=narrow.page.locator("#settings-heading"))
    narrow.context.close()
    assert not narrow.watch.problems, "\n".join(narrow.watch.problems)


def test_the_start_menu_shows_the_log_size_as_it_grows(console: Console, detailed: str) -> None:
    server = console.server
    page = console.open(f"/deployments/{detailed}")
    expect(page.locator("#state")).to_have_text("running")
    instance = server.deployment(detailed)["instances"][0]  # type: ignore[index]
    log_file = Path(instance["log_path"])
    current = page.locator("#log-start option[value=current]")

    def shown_size() -> str:
        starts = server.api.get(f"/api/v1/deployments/{detailed}/logs/starts?instance={instance['id']}")
        size = next(start["size_bytes"] for start in starts.json()["starts"] if start["current"])
        return format_bytes(size)

    expect(current).to_contain_text(f": {shown_size()},")
    # The engine writes more: the followed log shows it, and the menu's size follows (next poll).
    with log_file.open("a") as log:
        log.write("a line the engine wrote later\n" * 200)
    expect(page.locator("#log")).to_contain_text("a line the engine wrote later")
    expect(current).to_contain_text(f": {shown_size()},", timeout=15_000)
    # Not followed, the log grows unseen: opening the menu asks for the size again. (Reading the
    # unfollowed log once more makes the next poll ask too: wait for that answer first.)
    with page.expect_response(lambda response: "/logs/starts" in response.url, timeout=15_000):
        page.locator("#log-follow").uncheck()
    with log_file.open("a") as log:
        log.write("written while nobody followed\n" * 300)
    page.locator("#log-start").focus()
    expect(current).to_contain_text(f": {shown_size()},")
