"""The dashboard's GPU cards, live, and the deploy form's GPU picker, on a server with two GPUs.

This host has none: the server runs with the NVML DOUBLE (``modelyard.testing.nvml_double``,
imported as ``pynvml`` from the front of its ``PYTHONPATH``), which answers NVML's calls from a
JSON file read at every ``nvmlInit``. Rewriting that file is a change of the GPUs' readings;
the page must show it without a reload (the server reads NVML every few seconds, the dashboard
asks every 2 s).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

import modelyard
from modelyard.testing.hub_doubles import HuggingFaceHubDouble

from .conftest import (
    NARROW,
    WIDE,
    Console,
    ConsoleServer,
    double_backend_yaml,
    new_console,
    serve_console,
    wait_until,
)
from .pages import horizontal_overflow_px, screenshot, unlabelled_fields

NVML_DOUBLE_FOLDER = Path(modelyard.__file__).resolve().parent / "testing" / "nvml_double"
MIB = 1024 * 1024
# Long enough for the server's next NVML read (every 5 s, at a controller tick) and the page's
# next poll (every 2 s), with room for a slow, shared machine.
LIVE_TIMEOUT_MS = 30_000


def h200(utilization_percent: int, memory_used_mib: int) -> dict[str, Any]:
    return {
        "name": "NVIDIA H200",
        "uuid": "GPU-5f0c2a7e-0000-4000-8000-000000000200",
        "memory_total_bytes": 143_771 * MIB,
        "memory_used_bytes": memory_used_mib * MIB,
        "utilization_percent": utilization_percent,
        "temperature_celsius": 54,
        "power_milliwatts": 312_400,
        "power_limit_milliwatts": 700_000,
    }


# A board that reports no power readings (NVML answers "Not Supported" for them).
L40S = {
    "name": "NVIDIA L40S",
    "uuid": "GPU-5f0c2a7e-0000-4000-8000-00000000040a",
    "memory_total_bytes": 46_068 * MIB,
    "memory_used_bytes": 2_048 * MIB,
    "utilization_percent": 3,
    "temperature_celsius": 31,
}


def write_gpus(path: Path, gpus: list[dict[str, Any]]) -> None:
    """The NVML double's file, replaced whole (the server never reads half of it)."""
    staged = path.with_suffix(".staged")
    staged.write_text(json.dumps({"driver_version": "580.95.05", "cuda_driver_version": 13000, "gpus": gpus}))
    os.replace(staged, path)


@pytest.fixture(scope="module")
def nvml_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("nvml") / "gpus.json"
    write_gpus(path, [h200(37, 20_480), L40S])
    return path


@pytest.fixture(scope="module")
def gpu_server(
    tmp_path_factory: pytest.TempPathFactory, hub: HuggingFaceHubDouble, nvml_file: Path
) -> Iterator[ConsoleServer]:
    """``modelyard serve`` whose NVML is the double, with the two GPUs of ``nvml_file``."""
    python_path = os.pathsep.join(filter(None, [str(NVML_DOUBLE_FOLDER), os.environ.get("PYTHONPATH")]))
    environment = {"PYTHONPATH": python_path, "MODELYARD_NVML_DOUBLE": str(nvml_file)}
    with serve_console(tmp_path_factory.mktemp("console-gpus"), hub, environment, docker=False) as server:
        yield server


@pytest.fixture(scope="module")
def double_backend_on(gpu_server: ConsoleServer) -> str:
    """The engine double (vLLM's flags), as an engine for GPUs, imported on the GPU server."""
    yaml_text = double_backend_yaml().replace("custom_framework: cpu", "custom_framework: cuda")
    response = gpu_server.api.post("/api/v1/backends/import", content=yaml_text)
    assert response.status_code == 201, response.text
    return str(response.json()[0]["name"])


@pytest.fixture
def gpu_console(browser: Browser, gpu_server: ConsoleServer) -> Iterator[Console]:
    session = new_console(browser, gpu_server, WIDE, signed_in=True)
    yield session
    session.context.close()
    assert not session.watch.problems, "\n".join(session.watch.problems)


def gpu_card(page: Page, title: str) -> Locator:
    return page.get_by_role("article", name=title)


def reading(card: Locator, label: str) -> Locator:
    """The value shown next to ``label`` on a GPU card."""
    return card.locator(f"xpath=.//dt[normalize-space()='{label}']/following-sibling::dd[1]")


def test_dashboard_shows_each_gpu_and_follows_its_readings_live(
    gpu_console: Console, browser: Browser, gpu_server: ConsoleServer, nvml_file: Path
) -> None:
    page = gpu_console.open("/")
    h200_card = gpu_card(page, "GPU 0 · NVIDIA H200")
    l40s_card = gpu_card(page, "GPU 1 · NVIDIA L40S")
    # 143,771 MiB is 140.4 GiB; 20,480 MiB used is 20.0 GiB (14 %), 123,291 MiB free 120.4 GiB.
    expect(reading(h200_card, "utilization")).to_have_text("37 %")
    expect(reading(h200_card, "memory used")).to_have_text("20.0 GiB (14 %)")
    expect(reading(h200_card, "memory free")).to_have_text("120.4 GiB of 140.4 GiB")
    expect(reading(h200_card, "temperature")).to_have_text("54 °C")
    expect(reading(h200_card, "power")).to_have_text("312 W of 700 W")
    # 46,068 MiB is 45.0 GiB; 2,048 MiB used (4 %); 44,020 MiB free is 43.0 GiB. No power readings.
    expect(reading(l40s_card, "utilization")).to_have_text("3 %")
    expect(reading(l40s_card, "memory used")).to_have_text("2.0 GiB (4 %)")
    expect(reading(l40s_card, "memory free")).to_have_text("43.0 GiB of 45.0 GiB")
    expect(reading(l40s_card, "temperature")).to_have_text("31 °C")
    expect(reading(l40s_card, "power")).to_have_text("–")
    expect(page.locator("#gpus-source")).to_contain_text("driver 580.95.05, CUDA 13.0")
    screenshot(page, "dashboard-gpus")

    narrow = new_console(browser, gpu_server, NARROW, signed_in=True)
    narrow.open("/")
    expect(reading(gpu_card(narrow.page, "GPU 1 · NVIDIA L40S"), "power")).to_have_text("–")
    assert horizontal_overflow_px(narrow.page) <= 0
    screenshot(narrow.page, "dashboard-gpus")
    narrow.context.close()
    assert not narrow.watch.problems, "\n".join(narrow.watch.problems)

    # A model loads on the H200: its readings change, and the open page follows (no reload).
    write_gpus(nvml_file, [h200(91, 130_000), L40S])
    # 130,000 MiB used is 127.0 GiB (90 %); 13,771 MiB free is 13.4 GiB.
    expect(reading(h200_card, "utilization")).to_have_text("91 %", timeout=LIVE_TIMEOUT_MS)
    expect(reading(h200_card, "memory used")).to_have_text("127.0 GiB (90 %)")
    expect(reading(h200_card, "memory free")).to_have_text("13.4 GiB of 140.4 GiB")
    expect(reading(l40s_card, "utilization")).to_have_text("3 %")


def test_deploy_form_offers_the_gpus_by_index_and_name(
    gpu_console: Console, gpu_server: ConsoleServer, tiny_model_dir: Path
) -> None:
    response = gpu_server.api.post("/api/v1/models", json={"name": "tiny", "path": str(tiny_model_dir)})
    assert response.status_code == 201, response.text
    page = gpu_console.open("/deployments/new?model=tiny")
    picker = page.get_by_role("group", name="GPU ids (instead of a count)")
    first = picker.get_by_label("GPU 0 · NVIDIA H200 · 140.4 GiB")
    second = picker.get_by_label("GPU 1 · NVIDIA L40S · 45.0 GiB")
    expect(first).not_to_be_checked()
    expect(second).not_to_be_checked()
    assert not unlabelled_fields(page)
    verdict = page.locator("#preflight")
    with page.expect_request(
        lambda request: (
            request.url.endswith("/deployments/preflight")
            and (request.post_data_json or {}).get("gpu_ids") == [1]
        )
    ):
        second.check()
    expect(verdict).to_contain_text("Ready to deploy as tiny on transformers")
    expect(verdict).to_contain_text("1 GPU(s) per replica")
    first.check()
    expect(verdict).to_contain_text("2 GPU(s) per replica")
    screenshot(page, "deploy-gpus")
    # Chosen ids serve one replica: two are refused with the fix, before anything is stored.
    page.get_by_label("Replicas", exact=True).fill("2")
    expect(verdict.get_by_role("alert")).to_contain_text("cannot serve 2 replicas")
    assert gpu_server.api.get("/api/v1/deployments").json() == []


def test_the_traffic_chart_says_when_there_is_no_traffic(gpu_console: Console, browser: Browser) -> None:
    """This server has had no gateway request: the chart says so, with no made-up peak."""
    page = gpu_console.open("/")
    chart = page.locator("#traffic-chart")
    expect(chart).to_contain_text("No traffic in this range")
    expect(chart).not_to_contain_text("peak")
    expect(chart.locator("rect.bar")).to_have_count(0)
    assert len(chart.locator(".axis-time text").all_text_contents()) >= 2, "the time axis is drawn"
    chart.scroll_into_view_if_needed()
    screenshot(page, "dashboard-no-traffic")


def test_a_replica_placed_by_memory_reads_as_worker_gpus_and_memory(
    gpu_console: Console,
    gpu_server: ConsoleServer,
    double_backend_on: str,
    tiny_model_dir: Path,
    nvml_file: Path,
) -> None:
    # Both GPUs with room for 20 GiB (a test above fills the H200), as the server reads them.
    write_gpus(nvml_file, [h200(37, 20_480), L40S])
    wait_until(
        lambda: gpu_server.api.get("/api/v1/gpus").json()["gpus"][0]["memory_used_bytes"] == 20_480 * MIB,
        LIVE_TIMEOUT_MS / 1000,
        "the server to read the H200 with 20 GiB used",
    )
    added = gpu_server.api.post("/api/v1/models", json={"name": "tiny", "path": str(tiny_model_dir)})
    assert added.status_code in (201, 409), added.text
    response = gpu_server.api.post(
        "/api/v1/deployments",
        json={
            "model": "tiny",
            "name": "by-memory",
            "backend": double_backend_on,
            "gpus_per_replica": 1,
            "gpu_memory": "20GiB",
            "skip_verification": True,
        },
    )
    assert response.status_code == 201, response.text
    try:
        gpu_server.wait_running("by-memory")
        page = gpu_console.open("/deployments/by-memory")
        expect(page.locator('#summary [data-field="placement_rule"]')).to_have_text(
            "any ready worker; 20.0 GiB booked per GPU"
        )
        card = page.locator(".card.instance").first
        expect(card.locator('[data-field="placement"]')).to_have_text(
            re.compile(r"^worker \S+ \(127\.0\.0\.1\), GPU [01]$")
        )
        expect(card.locator('[data-field="memory_booked"]')).to_have_text("20.0 GiB per GPU")
        expect(card).to_contain_text("--gpu-memory-utilization 0.")
        assert "{" not in card.inner_text(), "no JSON on the card"
        screenshot(page, "deployment-gpus", top=page.locator("#instances-heading"))
    finally:
        gpu_server.api.delete("/api/v1/deployments/by-memory")
