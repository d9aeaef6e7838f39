"""A user's first deployment, all in the browser: import the engine's backend YAML, add the model
directory (a wrong path answered with "did you mean"), deploy through the form (a flag of the
other engine shown by doctor before submitting and refused with the fix), watch it run and read
its log live, scale to 2, stop, start, delete."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import expect

from .conftest import DOUBLE_BACKEND, Console, double_backend_yaml

SGLANG_FLAG = "--mem-fraction-static 0.8"


def test_deploy_through_the_form_and_operate_it(console: Console, tiny_model_dir: Path) -> None:
    page = console.open("/backends")
    editor = page.get_by_label("Backend YAML")
    # Two mistakes in two versions: both listed, both lines marked.
    editor.fill(
        double_backend_yaml().replace("custom_framework: cpu", "custom_framework: rocm")
        + '  "2.0":\n    run_command: my-server \'unbalanced\n'
    )
    page.get_by_role("button", name="Check only").click()
    problems = page.locator("#yaml-problems li")
    expect(problems).to_have_count(2)
    expect(problems.nth(0)).to_contain_text("custom_framework 'rocm' is not supported")
    expect(problems.nth(1)).to_contain_text("cannot be split with shell quoting rules")
    expect(page.locator("#yaml-gutter .bad")).to_have_count(2)
    editor.fill(double_backend_yaml())
    page.get_by_role("button", name="Import").click()
    expect(page.locator("#import-result")).to_contain_text(f"Imported {DOUBLE_BACKEND}")
    expect(page.locator(f'[data-backend="{DOUBLE_BACKEND}"]')).to_contain_text("custom")

    page = console.open("/models")
    console.watch.expect(400, r"/api/v1/models$")
    page.get_by_label("Absolute path on the server's host").fill(str(tiny_model_dir.parent))
    page.get_by_label("Name (default: the folder's)").fill("flow-model")
    page.get_by_role("button", name="Add").click()
    expect(page.locator("#add-result .error")).to_contain_text(f"did you mean {tiny_model_dir}")
    page.get_by_label("Absolute path on the server's host").fill(str(tiny_model_dir))
    page.get_by_label("Name (default: the folder's)").fill("flow-model")
    page.get_by_role("button", name="Add").click()
    expect(page.locator("#add-result .ok")).to_contain_text("Added flow-model")
    expect(page.locator("#models")).to_contain_text("Qwen3ForCausalLM")

    page = console.open("/deployments/new?model=flow-model")
    page.get_by_label("Backend", exact=True).select_option(DOUBLE_BACKEND)
    page.get_by_label("Deployment name").fill("flow")
    parameters = page.get_by_label("Backend parameters")
    parameters.fill(SGLANG_FLAG)
    # Doctor's finding appears while typing, before anything is submitted.
    finding = page.locator('#preflight li[data-check="param.unknown-flag"]')
    expect(finding).to_contain_text("has no flag --mem-fraction-static")
    expect(finding).to_contain_text("--gpu-memory-utilization")
    console.watch.expect(400, r"/api/v1/deployments$")
    page.get_by_role("button", name="Deploy").click()
    refusal = page.locator("#deploy-result [role=alert]")
    expect(refusal).to_contain_text("doctor refused the deployment")
    expect(refusal).to_contain_text("Fix: --mem-fraction-static is SGLang's flag")
    assert console.server.deployment("flow") is None, "a refused deployment must store nothing"

    parameters.fill("--max-model-len 512")
    # The engine double answers chats but has no tool-call parser: the suite would keep it out.
    page.get_by_label("Skip the verification suite after start").check()
    expect(page.locator("#preflight .ok")).to_contain_text("Ready to deploy as flow")
    page.get_by_role("button", name="Deploy").click()
    page.wait_for_url(re.compile(r"/deployments/flow$"))
    expect(page.locator("#state")).to_have_text("running", timeout=90_000)

    # The engine's log, streamed while it is written.
    log = page.locator("#log")
    expect(log).to_contain_text("Application startup complete", timeout=30_000)

    page.get_by_label("Replicas", exact=True).fill("2")
    page.get_by_role("button", name="Scale", exact=True).click()
    expect(page.locator('.instance[data-state="running"]')).to_have_count(2, timeout=90_000)
    second = page.locator("#log-instance option", has_text="replica 1").get_attribute("value")
    assert second is not None
    page.get_by_label("Instance", exact=True).select_option(second)
    expect(log).to_have_attribute("data-instance", second)
    expect(log).to_contain_text("Application startup complete", timeout=30_000)

    page.get_by_role("button", name="Stop").click()
    expect(page.locator("#state")).to_have_text("stopped", timeout=60_000)
    page.get_by_role("button", name="Start").click()
    expect(page.locator("#state")).to_have_text("running", timeout=90_000)
    events = page.locator("#events")
    expect(events).to_contain_text("stopped")

    console.watch.expect(404, r"/api/v1/deployments/flow")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete").click()
    expect(page.locator("#state")).to_have_text("gone", timeout=60_000)
    assert console.server.deployment("flow") is None
