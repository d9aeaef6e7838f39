"""A short benchmark started from the form, watched to its end, its report's charts shown (also
at 390 px)."""

from __future__ import annotations

import re

from playwright.sync_api import Browser, expect

from .conftest import NARROW, Console, new_console
from .pages import horizontal_overflow_px, screenshot, wait_loaded


def test_a_benchmark_from_the_form_shows_its_report(
    console: Console, browser: Browser, double_deployment: str
) -> None:
    page = console.open(f"/benchmarks?deployment={double_deployment}")
    page.get_by_label("Concurrency").fill("1,2")
    page.get_by_label("Prompt tokens").fill("32")
    page.get_by_label("Output tokens").fill("16")
    page.get_by_label("Requests per point").fill("6")
    page.get_by_role("button", name="Start").click()
    page.wait_for_url(re.compile(r"/benchmarks/\d{8}-\d{6}-[0-9a-f]{6}$"))
    expect(page.locator("#state")).to_have_text("succeeded", timeout=120_000)
    expect(page.locator("#summary table tbody tr")).to_have_count(2)
    report = page.frame_locator("#report")
    expect(report.locator("h1")).to_contain_text("Benchmark")
    expect(report.locator(".js-plotly-plot").first).to_be_visible(timeout=30_000)
    wait_loaded(page)
    screenshot(page, "benchmark")
    run_url = page.url
    narrow = new_console(browser, console.server, NARROW, signed_in=True)
    narrow.page.goto(run_url)
    expect(narrow.page.locator("#state")).to_have_text("succeeded")
    chart = narrow.page.frame_locator("#report").locator(".js-plotly-plot").first
    expect(chart).to_be_visible(timeout=30_000)
    wait_loaded(narrow.page)
    assert horizontal_overflow_px(narrow.page) <= 0
    screenshot(narrow.page, "benchmark", top=chart)
    narrow.context.close()
    assert not narrow.watch.problems, "\n".join(narrow.watch.problems)
    page.goto(f"{console.server.url}/benchmarks")
    expect(page.locator("#runs")).to_contain_text("succeeded")
