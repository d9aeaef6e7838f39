"""Through a real ``modelyard serve``: an engine that logs 7 % less KV cache than the estimate
predicts, started three times, and the estimate corrected by those starts where a user reads it:
the deploy page's memory estimate, ``modelyard estimate`` and ``/metrics``.

The GPU is the NVML DOUBLE's H100 (this host has none); the engine is the vLLM double, whose
memory model gives it 80 GiB x knob - an overhead the test sets 7 % of the KV cache above the
estimator's (as an engine with under-counted overheads).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

import modelyard
from modelyard.estimate import GpuSpec, estimate_memory
from modelyard.estimate.gpus import cuda_visible_total_bytes
from modelyard.modeldir import read_model_facts
from modelyard.testing.hub_doubles import HuggingFaceHubDouble
from modelyard.testing.stand_ins import build_stand_in

from .conftest import WIDE, Console, ConsoleServer, new_console, serve_console, wait_until

NVML_DOUBLE_FOLDER = Path(modelyard.__file__).resolve().parent / "testing" / "nvml_double"
H100_NAME = "NVIDIA H100 80GB HBM3"
H100_BYTES = 81_559 * 1024 * 1024
VERSION = "0.25.0"
PARAMETERS = ["--gpu-memory-utilization", "0.5", "--max-model-len", "8192"]
CORRECTED = "corrected by 3 starts on this cluster (these settings), last error +0.0 %"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Four of Qwen3-8B's 36 layers (its real per-layer bytes): 3.9 GiB of weights, which the
    # server's host check (host.ram-low) finds room for in any CI host's RAM, unlike the 15.3 GiB
    # of the whole model.
    return build_stand_in(
        "qwen3-8b", tmp_path_factory.mktemp("stand-in") / "Qwen3-8B", config_changes={"num_hidden_layers": 4}
    )


@pytest.fixture(scope="module")
def h100_server(
    tmp_path_factory: pytest.TempPathFactory, hub: HuggingFaceHubDouble, model_dir: Path
) -> Iterator[ConsoleServer]:
    """``modelyard serve`` on one H100 (the NVML double), with the vLLM double 7 % short of KV."""
    nvml = tmp_path_factory.mktemp("nvml") / "gpus.json"
    gpu = {"name": H100_NAME, "uuid": "GPU-h100", "memory_total_bytes": H100_BYTES, "memory_used_bytes": 0}
    nvml.write_text(json.dumps({"driver_version": "580.95.05", "cuda_driver_version": 13000, "gpus": [gpu]}))
    python_path = os.pathsep.join(filter(None, [str(NVML_DOUBLE_FOLDER), os.environ.get("PYTHONPATH")]))
    environment = {"PYTHONPATH": python_path, "MODELYARD_NVML_DOUBLE": str(nvml)}
    # The engine sees CUDA's total, NVML's less the driver's reservation (the estimate's view too).
    engine_total = cuda_visible_total_bytes(H100_BYTES)
    estimate = estimate_memory(
        read_model_facts(model_dir),
        "vllm",
        [GpuSpec(name=H100_NAME, memory_total_bytes=engine_total)],
        PARAMETERS,
        engine_version=VERSION,
    )
    budget = math.ceil(engine_total * 0.5)
    overhead_gib = (budget - 0.93 * estimate.plan_on_total.kv_cache_bytes) / (1 << 30)
    backend = (
        "backend_name: vllm-short\n"
        "description: the vLLM double, 7 % short of the estimated KV cache (a test double)\n"
        f'default_version: "{VERSION}"\n'
        "health_check_path: /health\n"
        "modelyard:\n"
        "  family: vllm\n"
        "version_configs:\n"
        f'  "{VERSION}":\n'
        f"    run_command: {sys.executable} -m modelyard.bench.reference_server vllm serve {{{{model_path}}}}"
        " --host {{worker_ip}} --port {{port}} --served-model-name {{model_name}}"
        f" --double-gpu-memory-gib {engine_total / (1 << 30)!r} --double-overhead-gib {overhead_gib!r}"
        f" --double-kv-bytes-per-position {estimate.cache.kv_bytes_per_token}\n"
        "    custom_framework: cuda\n"
        "    modelyard:\n"
        "      stop_grace_seconds: 5\n"
    )
    with serve_console(tmp_path_factory.mktemp("console-h100"), hub, environment, docker=False) as server:
        imported = server.api.post("/api/v1/backends/import", content=backend)
        assert imported.status_code == 201, imported.text
        added = server.api.post("/api/v1/models", json={"name": "qwen3-8b", "path": str(model_dir)})
        assert added.status_code == 201, added.text
        yield server


def state_of(server: ConsoleServer, name: str) -> str | None:
    deployment = server.deployment(name)
    return None if deployment is None else str(deployment["state"])


def starts_recorded(server: ConsoleServer) -> int:
    return len(server.api.get("/api/v1/start-observations").json()["starts"])


def test_the_estimate_is_corrected_by_three_starts_where_the_user_reads_it(
    browser: Browser, h100_server: ConsoleServer, model_dir: Path
) -> None:
    server = h100_server
    created = server.api.post(
        "/api/v1/deployments",
        json={
            "model": "qwen3-8b",
            "name": "short",
            "backend": "vllm-short",
            "gpus_per_replica": 1,
            "backend_parameters": " ".join(PARAMETERS),
            "skip_verification": True,
        },
    )
    assert created.status_code == 201, created.text
    for start in (1, 2, 3):
        if start > 1:
            assert server.api.post("/api/v1/deployments/short/stop").is_success
            wait_until(lambda: state_of(server, "short") == "stopped", 60, "short stopped")
            assert server.api.post("/api/v1/deployments/short/start").is_success
        wait_until(lambda: starts_recorded(server) == start, 90, f"start {start} recorded")  # noqa: B023
    starts = server.api.get("/api/v1/start-observations").json()["starts"]
    errors = [round(row["shown_kv_tokens"] / row["logged_kv_tokens"] - 1, 3) for row in starts]
    assert errors[:2] == [0.075, 0.075] and abs(errors[2]) < 0.001, errors
    assert {row["gpu_model"] for row in starts} == {"H100"}
    raw_tokens = starts[0]["predicted_kv_tokens"]

    console: Console = new_console(browser, server, WIDE, signed_in=True)
    try:
        page = console.open("/deployments/new?model=qwen3-8b")
        page.get_by_label("Backend", exact=True).select_option("vllm-short")
        page.get_by_label("Deployment name").fill("another")
        page.get_by_label("Backend parameters").fill(" ".join(PARAMETERS))
        summary = page.locator('#preflight li[data-check="memory.summary"]')
        expect(summary).to_contain_text(CORRECTED)
        # Beside the corrected figure: the estimator's own, and what the correction moved.
        expect(summary).to_contain_text(f"{raw_tokens:,} tokens before correction")
        expect(summary).to_contain_text("GiB per GPU (-7.0 %)")
        assert not console.watch.problems, "\n".join(console.watch.problems)
    finally:
        console.context.close()

    environment = {**os.environ, "MODELYARD_URL": server.url, "MODELYARD_DATA_DIR": str(server.data_dir)}
    estimated = subprocess.run(
        [sys.executable, "-m", "modelyard.cli.main", "estimate", str(model_dir), "--gpus", "1xH100",
         "--backend", "vllm", "--engine-version", VERSION, "--args", " ".join(PARAMETERS)],
        env={**environment, "NO_COLOR": "1"}, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert f"correction: {CORRECTED}" in estimated
    assert "KV tokens, uncorrected" in estimated
