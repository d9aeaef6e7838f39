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
