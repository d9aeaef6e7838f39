"""A short benchmark started from the form, watched to its end, its report's charts shown (also
at 390 px)."""

from __future__ import annotations

import re

from playwright.sync_api import Browser, Page, expect

from .conftest import NARROW, WIDE, Console, ConsoleServer, new_console, wait_until
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


def finished_run(server: ConsoleServer, deployment: str) -> str:
    """A short benchmark run started through the REST API, waited for to its end."""
    body = {
        "deployment": deployment,
        "concurrency": [1],
        "input_tokens": 16,
        "output_tokens": 8,
        "num_requests": 4,
    }
    response = server.api.post("/api/v1/benchmarks", json=body)
    assert response.status_code in (200, 201, 202), response.text
    run_id: str = response.json()["id"]
    wait_until(
        lambda: server.api.get(f"/api/v1/benchmarks/{run_id}").json()["state"] in ("succeeded", "failed"),
        180,
        f"benchmark {run_id} to finish",
    )
    assert server.api.get(f"/api/v1/benchmarks/{run_id}").json()["state"] == "succeeded"
    return run_id


def frame_cut_px(page: Page, selector: str) -> dict[str, int]:
    """How much of a frame's content is cut off: its document's size beyond the frame's box."""
    cut: dict[str, int] = page.evaluate(
        """(selector) => {
            const frame = document.querySelector(selector);
            const root = frame.contentDocument.documentElement;
            return {
                height: root.scrollHeight - frame.clientHeight,
                width: root.scrollWidth - frame.clientWidth,
            };
        }""",
        selector,
    )
    return cut


def test_the_comparison_frame_shows_its_charts_whole(
    console: Console, browser: Browser, double_deployment: str
) -> None:
    runs = [finished_run(console.server, double_deployment) for _ in range(2)]
    for viewport in (WIDE, NARROW):
        session = (
            console if viewport is WIDE else new_console(browser, console.server, NARROW, signed_in=True)
        )
        page = session.page
        page.goto(f"{console.server.url}/benchmarks")
        page.get_by_label("Compare", exact=True).select_option(runs[0])
        page.get_by_label("with", exact=True).select_option(runs[1])
        page.get_by_role("button", name="Compare side by side").click()
        frame = page.frame_locator("#compare-frame")
        expect(frame.locator(".js-plotly-plot").last).to_be_visible(timeout=30_000)
        page.wait_for_function(
            """() => { const frame = document.querySelector('#compare-frame');
                return frame.contentDocument.documentElement.scrollHeight <= frame.clientHeight + 1; }""",
            timeout=10_000,
        )
        assert frame_cut_px(page, "#compare-frame")["height"] <= 1
        assert frame_cut_px(page, "#compare-frame")["width"] <= 1
        assert horizontal_overflow_px(page) <= 0, f"the page is wider than {viewport['width']} px"
        screenshot(page, "benchmarks-compare", top=page.locator("#compare-frame"))
        if session is not console:
            session.context.close()
            assert not session.watch.problems, "\n".join(session.watch.problems)
