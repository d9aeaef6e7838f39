"""A tune started from the console: the /tunes form posts to ``POST /api/v1/tunes``, whose
server-side errors are shown beside their fields, and a valid form starts ``modelyard tune`` on
the server's host, listed at once. The server is a real ``modelyard serve`` on two 16 GiB GPUs of
the NVML DOUBLE, its backend the vLLM engine DOUBLE with a known curve (tests/tune)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Response, expect

from modelyard.testing.hub_doubles import HuggingFaceHubDouble
from modelyard.testing.stand_ins import build_stand_in
from tune.conftest import MODEL_NAME, add_model_and_backend, two_gpu_environment

from .conftest import WIDE, ConsoleServer, new_console, serve_console
from .pages import wait_loaded


@pytest.fixture(scope="module")
def tune_server(
    tmp_path_factory: pytest.TempPathFactory, hub: HuggingFaceHubDouble
) -> Iterator[ConsoleServer]:
    root = tmp_path_factory.mktemp("tune-console")
    with serve_console(root, hub, two_gpu_environment(root), docker=False) as server:
        # Four of Qwen3-8B's layers: the host check finds RAM for them on any CI host.
        model_dir = build_stand_in(MODEL_NAME, root / "Qwen3-8B", config_changes={"num_hidden_layers": 4})
        add_model_and_backend(server.api.post, model_dir)
        yield server


def test_a_tune_is_started_from_the_form_and_bad_fields_are_named_beside_them(
    browser: Browser, tune_server: ConsoleServer, tmp_path: Path
) -> None:
    console = new_console(browser, tune_server, WIDE, signed_in=True)
    page = console.page
    # The three bad forms below: the server's 400 answers, shown beside their fields.
    console.watch.expect(400, r"/api/v1/tunes$")
    page.goto(tune_server.url + "/tunes")
    wait_loaded(page)
    expect(page.locator("#model")).to_have_value("qwen3-8b")
    page.get_by_label("GPUs (as the estimator takes them)").fill("2x16GB")
    page.get_by_label("Backends").fill("vllm-double")
    page.get_by_label("Time budget (e.g. 45m; empty: none)").fill("2m")

    # Each bad field's server-side error, beside it.
    page.get_by_label("SLOs").fill("ttft_p95 under 2s")
    page.get_by_role("button", name="Start the tune").click()
    expect(page.locator("#slo-error")).to_be_visible()
    expect(page.locator("#slo-error")).to_contain_text("ttft_p95")
    expect(page.locator("#slo")).to_have_attribute("aria-invalid", "true")
    page.get_by_label("SLOs").fill("ttft_p95<=2s")
    page.get_by_label("Time budget (e.g. 45m; empty: none)").fill("soon")
    page.get_by_role("button", name="Start the tune").click()
    expect(page.locator("#budget-error")).to_contain_text("'soon' is not a duration")
    expect(page.locator("#slo-error")).to_be_hidden()
    page.get_by_label("Time budget (e.g. 45m; empty: none)").fill("2m")
    bad_workload = tmp_path / "workload.yaml"
    bad_workload.write_text("name: mine\nprompt_tokens: many\n")
    page.get_by_label("Or a workload file (YAML or JSON)").set_input_files(str(bad_workload))
    page.get_by_role("button", name="Start the tune").click()
    expect(page.locator("#workload_file-error")).to_be_visible()
    page.get_by_label("Or a workload file (YAML or JSON)").set_input_files([])

    def is_start(response: Response) -> bool:
        return response.url.endswith("/api/v1/tunes") and response.request.method == "POST"

    with page.expect_response(is_start) as answer:
        page.get_by_role("button", name="Start the tune").click()
    started = answer.value.json()
    assert answer.value.status == 202, started
    try:
        tune_id = started["tune_id"]
        expect(page.locator("#start-result")).to_contain_text(f"Tune {tune_id} started")
        row = page.locator("#tunes").get_by_role("row").filter(has_text=tune_id)
        expect(row).to_contain_text("qwen3-8b")
        expect(row).to_contain_text("2x16GB")
        listed = tune_server.api.get(f"/api/v1/tunes/{tune_id}").json()
        assert listed["cli"]["backends"] == "vllm-double" and listed["cli"]["slo"] == "ttft_p95<=2s"
        page.locator("#start-result").get_by_role("link", name=tune_id).click()
        expect(page.get_by_role("heading", level=1)).to_contain_text(tune_id)
    finally:
        os.killpg(started["pid"], signal.SIGTERM)
    console.context.close()
    assert not console.watch.problems, "\n".join(console.watch.problems)
