"""The backend YAML editor says where each problem is once: "line 6, column 5: ...", not the
position again inside the message."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from .conftest import Console, double_backend_yaml
from .pages import screenshot


def test_each_yaml_problem_states_its_position_once(console: Console) -> None:
    page = console.open("/backends")
    text = double_backend_yaml().replace("custom_framework: cpu", "custom_framework: rocm")
    bad_line = text.splitlines().index("    custom_framework: rocm") + 1
    page.get_by_label("Backend YAML").fill(text)
    page.get_by_role("button", name="Check only").click()
    problem = page.locator("#yaml-problems li")
    expect(problem).to_have_count(1)
    expect(problem).to_contain_text(f"line {bad_line}, column 5: ")
    shown = problem.inner_text()
    assert len(re.findall(r"line \d+", shown)) == 1, shown
    expect(page.locator("#yaml-gutter .bad")).to_have_text(str(bad_line))
    screenshot(page, "backends-problem")


def test_a_registry_credential_is_stored_from_the_form_and_its_password_never_shown(console: Console) -> None:
    password = "console-registry-password-8d2c"
    page = console.open("/backends")
    page.get_by_label("Name", exact=True).fill("console-lab")
    page.get_by_label("Registry (host:port)").fill("127.0.0.1:5999")
    page.get_by_label("Username").fill("ci")
    page.get_by_label("Password or token").fill(password)
    page.get_by_role("button", name="Store").click()
    expect(page.locator("#credential-result")).to_contain_text("Stored console-lab for 127.0.0.1:5999")
    row = page.locator("#credentials tr", has_text="console-lab")
    expect(row).to_contain_text("********")
    expect(page.get_by_label("Password or token")).to_have_value("")
    assert password not in page.content()
    console.watch.expect(400, r"/api/v1/registry-credentials$")
    page.get_by_label("Registry (host:port)").fill("https://127.0.0.1:5999/")
    page.get_by_label("Password or token").fill(password)
    page.get_by_role("button", name="Store").click()
    expect(page.locator("#credential-result")).to_contain_text("give the host (and port) only")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Remove credential console-lab").click()
    expect(page.locator("#credentials tr", has_text="console-lab")).to_have_count(0)
