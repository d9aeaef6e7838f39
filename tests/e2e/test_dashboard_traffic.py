"""The dashboard's gateway traffic chart: drawn at the card's own width (nothing stretched, at
1280 px as at 390 px), over a time axis with clock labels, its peak named with its unit. The
empty chart ("No traffic in this range") is in test_dashboard_gpus.py, on a server with none."""

from __future__ import annotations

import re

import openai
from playwright.sync_api import Browser, Page, expect

from .conftest import NARROW, WIDE, ConsoleServer, new_console
from .pages import screenshot, wait_loaded


def chart_scale(page: Page) -> dict[str, float]:
    """How the chart's drawing is scaled on screen: x and y (1 and 1: drawn in pixels, unstretched)."""
    scale: dict[str, float] = page.evaluate(
        """() => {
            const matrix = document.querySelector('#traffic-chart svg').getScreenCTM();
            return {x: matrix.a, y: matrix.d};
        }"""
    )
    return scale


def some_traffic(server: ConsoleServer, deployment: str) -> None:
    key = server.api.post("/api/v1/keys", json={"name": "traffic-chart"})
    assert key.status_code == 201, key.text
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=key.json()["key"], max_retries=0)
    for _ in range(3):
        client.chat.completions.create(
            model=deployment, messages=[{"role": "user", "content": "hello"}], max_tokens=16
        )


def test_the_traffic_chart_keeps_its_shape_has_a_time_axis_and_names_its_peak(
    browser: Browser, console_server: ConsoleServer, double_deployment: str
) -> None:
    some_traffic(console_server, double_deployment)
    for viewport in (WIDE, NARROW):
        session = new_console(browser, console_server, viewport, signed_in=True)
        page = session.page
        page.goto(console_server.url + "/")
        wait_loaded(page)
        chart = page.locator("#traffic-chart")
        caption = chart.locator("figcaption")
        expect(caption).to_contain_text(re.compile(r"peak \d+(\.\d+)? output tokens/s at \d{1,2}:\d{2}"))
        scale = chart_scale(page)
        assert abs(scale["x"] - scale["y"]) < 0.02 and abs(scale["x"] - 1) < 0.02, (
            f"at {viewport['width']} px the chart is drawn scaled {scale}: stretched"
        )
        labels = chart.locator(".axis-time text").all_text_contents()
        assert len(labels) >= 2 and all(
            re.fullmatch(r"\d{1,2}:\d{2}( ?[AP]M)?", label) for label in labels
        ), labels
        chart.scroll_into_view_if_needed()
        screenshot(page, "dashboard-traffic")
        session.context.close()
        assert not session.watch.problems, "\n".join(session.watch.problems)
