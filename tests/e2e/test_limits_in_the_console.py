"""Limits in the console: a key made with limits shows them and what it has used, and its
requests per minute are enforced; a deployment's limits are set on its page and enforced."""

from __future__ import annotations

import time

import openai
import pytest
from playwright.sync_api import expect

from .conftest import Console


def _ask(client: openai.OpenAI, deployment: str) -> None:
    client.chat.completions.create(
        model=deployment, messages=[{"role": "user", "content": "hello"}], max_tokens=4
    )


def test_a_key_made_with_limits_shows_them_and_its_use(console: Console, double_deployment: str) -> None:
    page = console.open("/keys")
    page.get_by_label("Name").fill("limited-in-browser")
    page.get_by_label("Requests per minute").fill("2")
    page.get_by_label("Token quota").fill("100000")
    page.get_by_label("Quota period").select_option("day")
    page.get_by_role("button", name="Create").click()
    key = page.locator("#new-key").inner_text()
    row = page.locator("#keys tr", has_text="limited-in-browser")
    expect(row).to_contain_text("2 requests/min · 100,000 tokens/day")

    client = openai.OpenAI(base_url=f"{console.server.url}/v1", api_key=key, max_retries=0)
    _ask(client, double_deployment)
    _ask(client, double_deployment)
    with pytest.raises(openai.RateLimitError, match="requests per minute: limit 2"):
        _ask(client, double_deployment)

    # The use shown: the last minute's requests (live), the quota's tokens (once usage is written).
    deadline = time.monotonic() + 10
    while True:
        page.reload()
        text = page.locator("#keys tr", has_text="limited-in-browser").inner_text()
        if "· 0 of 100,000" not in text or time.monotonic() > deadline:
            break
    expect(row).to_contain_text("2 requests")
    expect(row).to_contain_text("in the last minute")
    expect(row).to_contain_text("of 100,000 tokens this day")
    assert "· 0 of 100,000" not in text, text


def test_a_deployments_limits_are_set_on_its_page(console: Console, double_deployment: str) -> None:
    page = console.open(f"/deployments/{double_deployment}")
    expect(page.locator("#limits-now")).to_contain_text("No limits")
    page.get_by_label("Requests at once").fill("5")
    page.get_by_label("Requests per minute").fill("1")
    page.get_by_role("button", name="Save limits").click()
    expect(page.locator("#limits-result")).to_contain_text("Limits saved.")
    expect(page.locator("#limits-now")).to_contain_text("1 requests per minute · 5 requests at once")
    shown = console.server.api.get(f"/api/v1/deployments/{double_deployment}").json()["limits"]
    assert shown == {"requests_per_minute": 1, "tokens_per_minute": None, "max_concurrent_requests": 5}

    key = console.server.api.post("/api/v1/keys", json={"name": "deployment-limited"}).json()["key"]
    client = openai.OpenAI(base_url=f"{console.server.url}/v1", api_key=key, max_retries=0)
    try:
        _ask(client, double_deployment)
        with pytest.raises(openai.RateLimitError, match=f"of deployment '{double_deployment}'"):
            _ask(client, double_deployment)
    finally:
        for field in ("limit-rpm", "limit-concurrent"):
            page.locator(f"#{field}").fill("")
        page.get_by_role("button", name="Save limits").click()
        expect(page.locator("#limits-now")).to_contain_text("No limits")
