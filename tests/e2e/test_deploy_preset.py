"""A preset chosen in the deploy form fills it (backend, version, GPUs, flags) and the doctor's
preflight runs on what it filled; a preset written for another architecture is refused with the
presets that fit."""

from __future__ import annotations

from playwright.sync_api import expect

from .conftest import Console
from .pages import screenshot


def test_a_preset_fills_the_deploy_form(console: Console, double_deployment: str) -> None:
    # The shared model is a Qwen3ForCausalLM: the Qwen3 presets are offered for it first.
    page = console.open("/deployments/new?model=tiny-shared")
    preset = page.get_by_label("Preset (a tested recipe: backend, version, GPUs and flags)")
    expect(preset).to_have_attribute("data-loaded", "true")
    fitting = preset.locator('optgroup[label="For tiny-shared"] option')
    expect(fitting.first).to_have_attribute("value", "qwen3-8b-vllm")
    recipe = console.server.api.get("/api/v1/presets/qwen3-8b-vllm").json()
    preset.select_option("qwen3-8b-vllm")
    info = page.locator("#preset-info")
    expect(info).to_contain_text(recipe["title"])
    expect(info).to_contain_text(", ".join(recipe["fits_as"]))
    expect(page.get_by_label("Backend", exact=True)).to_have_value(recipe["backend"])
    expect(page.get_by_label("Version", exact=True)).to_have_value(recipe["version"])
    expect(page.get_by_label("GPUs per replica (empty: automatic)")).to_have_value(str(recipe["gpus"]))
    parameters = page.get_by_label("Backend parameters (one or more lines, shell quoting)")
    expect(parameters).to_have_value("\n".join(recipe["parameters"]))
    assert "--reasoning-parser qwen3" in recipe["parameters"]
    # Preflight judged what the preset filled: this host has no GPU for it.
    expect(page.locator("#preflight [role=alert]")).to_contain_text("GPU")
    screenshot(page, "deploy-preset")

    console.watch.expect(409, r"/api/v1/presets/qwen3\.6-27b-vllm\?model=tiny-shared$")
    preset.select_option("qwen3.6-27b-vllm")
    refusal = page.locator("#preset-info [role=alert]")
    expect(refusal).to_contain_text("is for Qwen3_5ForConditionalGeneration")
    expect(refusal).to_contain_text("presets for it: qwen3-8b-vllm")
    expect(page.get_by_label("Backend", exact=True)).to_have_value("vllm")  # the form kept its values
