"""The playground's Thinking box shows what is really sent: for an engine that refuses
``chat_template_kwargs`` (transformers serve) it is disabled, neither on nor off (nothing is
sent: the chat template decides), and says why; for one that takes it, the user's choice."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from .conftest import NARROW, Console, ConsoleServer, new_console
from .pages import screenshot


@pytest.fixture(scope="module")
def idle_transformers(console_server: ConsoleServer, tiny_model_dir: Path) -> Iterator[str]:
    """A transformers deployment with no replica: listed, never started (nothing to wait for)."""
    api = console_server.api
    response = api.post("/api/v1/models", json={"name": "tiny-idle", "path": str(tiny_model_dir)})
    assert response.status_code == 201, response.text
    response = api.post(
        "/api/v1/deployments",
        json={"model": "tiny-idle", "name": "idle-transformers", "backend": "transformers", "replicas": 0},
    )
    assert response.status_code == 201, response.text
    yield "idle-transformers"
    api.delete("/api/v1/deployments/idle-transformers")


def test_the_disabled_thinking_box_shows_what_is_sent_and_why(
    console: Console, browser: Browser, idle_transformers: str, double_deployment: str
) -> None:
    page = console.open(f"/playground?deployment={idle_transformers}")
    box = page.get_by_label("Thinking")
    expect(box).to_be_disabled()
    expect(box).not_to_be_checked()
    assert box.evaluate("(box) => box.indeterminate"), "neither on nor off: nothing is sent"
    note = page.locator("#" + (box.get_attribute("aria-describedby") or "missing-description"))
    expect(note).to_contain_text("Not sent")
    expect(note).to_contain_text("refuses chat_template_kwargs")
    screenshot(page, "playground-thinking")
    # An engine that takes the field: the box is the user's choice again (on by default).
    page.get_by_label("Deployment").select_option(double_deployment)
    expect(box).to_be_enabled()
    expect(box).to_be_checked()
    assert not box.evaluate("(box) => box.indeterminate")
    box.uncheck()
    page.get_by_label("Deployment").select_option(idle_transformers)
    expect(box).not_to_be_checked()
    page.get_by_label("Deployment").select_option(double_deployment)
    expect(box).not_to_be_checked()
    narrow = new_console(browser, console.server, NARROW, signed_in=True)
    narrow.page.goto(f"{console.server.url}/playground?deployment={idle_transformers}")
    expect(narrow.page.locator("#thinking-note")).to_contain_text("Not sent")
    screenshot(narrow.page, "playground-thinking")
    narrow.context.close()
    assert not narrow.watch.problems, "\n".join(narrow.watch.problems)
