"""The console's pull form, the same code path as the CLI and the API: a malformed source refused
at once with what is wrong (nothing stored), and a model whose hub gave no hash for a file shown
``unverified`` in the models table and on its page, with what was checked."""

from __future__ import annotations

from playwright.sync_api import expect

from .conftest import HUB_REPOSITORY, Console

SHARD = "model-00003-of-00007.safetensors"
NAME = "mirror-copy"
NOT_CHECKED = f"1 not checked: no hash given by the hub, only the size ({SHARD})"
REFUSAL = "'Qwen/a..b' in 'hf://Qwen/a..b' is not a repository id: the name has '..'"


def test_the_pull_form_refuses_a_malformed_source_and_shows_an_unverified_model(console: Console) -> None:
    server = console.server
    page = console.open("/models")
    source = page.get_by_label("Source (hf://ORG/NAME[@REVISION] or ms://...)")
    console.watch.expect(400, r"/api/v1/models/pull$")
    source.fill("hf://Qwen/a..b")
    page.get_by_role("button", name="Pull", exact=True).click()
    refusal = page.locator("#pull-result")
    expect(refusal).to_contain_text(REFUSAL)
    expect(refusal).to_contain_text("e.g. Qwen/Qwen3-8B")
    assert server.api.get("/api/v1/models/Qwen/a..b").status_code == 404

    server.hub.faults.hide_hash(SHARD)
    try:
        source.fill(f"hf://{HUB_REPOSITORY}")
        page.get_by_label("Name (default: the repository's)").fill(NAME)
        page.get_by_role("button", name="Pull", exact=True).click()
        expect(page.locator("#pull-result .ok")).to_contain_text(f"Pulling {NAME}: task")
        [task] = [task for task in server.api.get("/api/v1/tasks").json() if task["model"] == NAME]
        card = page.locator(f'.task[data-task="{task["id"]}"]')
        expect(card).to_have_attribute("data-state", "completed", timeout=60_000)
        expect(card).to_contain_text(NOT_CHECKED)
    finally:
        server.hub.faults.reveal_hash(SHARD)
    row = page.locator("#models tr", has_text=NAME)
    expect(row.locator(".badge")).to_have_text("unverified")
    page.goto(f"{server.url}/models/{NAME}")
    expect(page.locator("#model")).to_contain_text(NOT_CHECKED)
    expect(page.locator("#model")).to_contain_text("not checked by any hash")
