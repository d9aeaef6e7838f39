"""The playground against a real engine: transformers serve with the tiny model trained to think
and to call a tool. Streamed answers, reasoning folded above the answer, the tool call shown,
usage and speed per answer, and "view code" giving exactly the request that was sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Request, expect

from .conftest import Console, ConsoleServer
from .pages import screenshot

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def thinker(console_server: ConsoleServer, trained_tiny_model_dir: Path) -> str:
    api = console_server.api
    response = api.post("/api/v1/models", json={"name": "thinker", "path": str(trained_tiny_model_dir)})
    assert response.status_code == 201, response.text
    response = api.post(
        "/api/v1/deployments",
        json={"model": "thinker", "backend": "transformers", "skip_verification": True},
    )
    assert response.status_code == 201, response.text
    console_server.wait_running("thinker", seconds=240)
    return "thinker"


def test_chat_streams_reasoning_folded_a_tool_call_and_matching_code(console: Console, thinker: str) -> None:
    sent: list[dict[str, Any]] = []

    def remember(request: Request) -> None:
        if request.url.endswith("/v1/chat/completions"):
            sent.append(json.loads(request.post_data or "{}"))

    page = console.open(f"/playground?deployment={thinker}")
    page.on("request", remember)
    page.get_by_label("Max tokens").fill("64")
    page.get_by_label("Message").fill("Say hello in one short sentence.")
    page.get_by_role("button", name="Send").click()
    answer = page.locator('.message.assistant[data-done="true"]').last
    expect(answer.locator(".content")).to_contain_text("Hello there.", timeout=120_000)
    reasoning = answer.locator("details.reasoning")
    expect(reasoning).to_be_visible()
    expect(reasoning).not_to_have_attribute("open", "")
    expect(reasoning.locator("summary")).to_contain_text("Reasoning")
    assert "A short answer." in (reasoning.locator(".reasoning-text").text_content() or "")
    expect(answer.locator(".stats")).to_contain_text("completion tokens")
    expect(answer.locator(".stats")).to_contain_text("TTFT")
    expect(answer.locator(".stats")).to_contain_text("tokens/s")

    page.get_by_role("button", name="New chat").click()
    page.get_by_role("button", name="Insert the example tool").click()
    page.get_by_label("Message").fill("What is the weather in Paris? Use the get_weather tool.")
    page.get_by_role("button", name="Send").click()
    answer = page.locator('.message.assistant[data-done="true"]').last
    call = answer.locator(".tool-call")
    expect(call).to_contain_text("get_weather", timeout=120_000)
    expect(call).to_contain_text('"city": "Paris"')

    page.get_by_role("button", name="View code").click()
    code = page.locator("#code-text")
    curl = code.inner_text()
    assert curl.startswith(f"curl {console.server.url}/v1/chat/completions")
    assert "$MODELYARD_API_KEY" in curl and console.page.evaluate("document.body.innerHTML").count("sk-") == 0
    shown = json.loads(curl.split("-d '", 1)[1].rsplit("'", 1)[0])
    assert shown == sent[-1], "the curl command is the request the playground sent"
    assert shown["tools"][0]["function"]["name"] == "get_weather"
    page.get_by_role("tab", name="Python (openai)").click()
    expect(code).to_contain_text('api_key=os.environ["MODELYARD_API_KEY"]')
    expect(code).to_contain_text(f'model="{thinker}"')
    page.get_by_role("tab", name="JavaScript").click()
    expect(code).to_contain_text("apiKey: process.env.MODELYARD_API_KEY")
    page.get_by_role("tab", name="curl").click()
    screenshot(page, "playground")
