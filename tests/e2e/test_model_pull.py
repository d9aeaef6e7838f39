"""A model pulled from the Hugging Face Hub DOUBLE in the browser: the dry run's plan (nothing
stored), then the pull with its progress file by file while a shard is held half-way, cancelled
(the model shown incomplete), resumed from the bytes on disk, and the model valid."""

from __future__ import annotations

from playwright.sync_api import Browser, expect

from .conftest import HUB_REPOSITORY, NARROW, Console, ConsoleServer, new_console
from .pages import screenshot

# One of the seven shards of the test model (74.6 KB), held after its first 20,000 bytes.
HELD_SHARD = "model-00006-of-00007.safetensors"
HELD_AT_BYTE = 20_000
NAME = "pulled"


def tasks_of(server: ConsoleServer, model: str) -> list[dict[str, object]]:
    return [task for task in server.api.get("/api/v1/tasks").json() if task["model"] == model]


def test_a_pull_shows_its_progress_and_is_cancelled_and_resumed(console: Console, browser: Browser) -> None:
    server = console.server
    repository = server.hub.repositories[HUB_REPOSITORY]
    page = console.open("/models")
    page.get_by_label("Source (hf://ORG/NAME[@REVISION] or ms://...)").fill(f"hf://{HUB_REPOSITORY}")
    page.get_by_label("Name (default: the repository's)").fill(NAME)
    page.get_by_role("button", name="Check only (dry run)").click()
    plan = page.locator("#pull-result .ok")
    expect(plan).to_contain_text(f"{len(repository.files)} file(s)")
    expect(plan).to_contain_text(f"commit {repository.commit}")
    expect(plan).to_contain_text("Nothing was stored")
    assert tasks_of(server, NAME) == [] and server.api.get(f"/api/v1/models/{NAME}").status_code == 404

    hold = server.hub.faults.hold_after(HELD_SHARD, HELD_AT_BYTE)
    page.get_by_role("button", name="Pull", exact=True).click()
    expect(page.locator("#pull-result .ok")).to_contain_text(f"Pulling {NAME}: task")
    assert hold.reached.wait(30), "the pull never reached the held shard"
    [task] = tasks_of(server, NAME)
    card = page.locator(f'.task[data-task="{task["id"]}"]')
    expect(card).to_have_attribute("data-state", "running")
    held_row = card.locator(f'li[data-file="{HELD_SHARD}"]')
    expect(held_row).to_contain_text("downloading")
    shard_size = repository.files[HELD_SHARD].size
    expect(held_row).to_contain_text(f"{HELD_AT_BYTE / 1024:.1f} KiB of {shard_size / 1024:.1f} KiB")
    progress = float(card.get_by_role("progressbar").get_attribute("aria-valuenow") or "0")
    assert 0 < progress < 100, progress
    expect(page.locator("#models")).to_contain_text("downloading")
    screenshot(page, "models-pull", top=page.locator("#tasks-heading"))
    narrow = new_console(browser, server, NARROW, signed_in=True)
    narrow.open("/models")
    expect(narrow.page.locator(f'.task[data-task="{task["id"]}"]')).to_have_attribute("data-state", "running")
    screenshot(narrow.page, "models-pull", top=narrow.page.locator("#tasks-heading"))
    narrow.context.close()
    assert not narrow.watch.problems, "\n".join(narrow.watch.problems)

    card.get_by_role("button", name=f"Cancel task {task['id']}").click()
    expect(card).to_have_attribute("data-state", "cancelled")
    expect(page.locator("#models tr", has_text=NAME)).to_contain_text("incomplete")
    hold.release()
    card.get_by_role("button", name=f"Resume task {task['id']}").click()
    expect(card).to_have_attribute("data-state", "completed", timeout=60_000)
    expect(card.locator(".task-progress")).to_contain_text("(100 %)")
    expect(page.locator("#models tr", has_text=NAME)).to_contain_text("valid")
    expect(page.locator("#models tr", has_text=NAME)).to_contain_text("Qwen3ForCausalLM")
    # The resume asked the hub for the rest of the shard only.
    last = server.hub.log.for_file(HELD_SHARD)[-1]
    assert last.range is not None and last.range.startswith("bytes=")
