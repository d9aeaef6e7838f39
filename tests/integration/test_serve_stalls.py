"""A start that hangs mid-stage on a real ``modelyard serve``: the instance says where it stopped.

The engine is the stalling engine DOUBLE (``modelyard.testing.stalling_engine``): it prints vLLM's
or SGLang's own start lines up to a stage (NCCL initialisation, weight loading, torch.compile,
CUDA graph capture) and then stays alive and silent, never answering its health path. It runs as
a custom backend through the process runtime, as a real engine would. The server watches with a
short stall limit (``MODELYARD_ENGINE_STALL_SECONDS``); each test awaits the instance's event that
names the stage and its fix, and checks that the instance keeps starting, with the same diagnosis
in ``GET /deployments/{name}`` (what ``modelyard ps`` and the console show).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from model_cache import ModelCache
from modelyard.testing.serve_process import ServeProcess, wait_until

pytestmark = pytest.mark.slow

STALLING_BACKEND_YAML = """\
backend_name: {name}
default_version: "1.0"
health_check_path: /health
version_configs:
  "1.0":
    entrypoint: python3 -m modelyard.testing.stalling_engine
    run_command: --flavor {flavor} --stall-at {stage} --repeat-every {repeat} serve {{{{model_path}}}}
      --host {{{{worker_ip}}}} --port {{{{port}}}}
    custom_framework: cpu
modelyard:
  family: custom
"""
EVENT_SECONDS = 90.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, test_models: ModelCache) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp("stalls")
    model_dir = test_models.copy("tiny-qwen3", root / "model")
    serve = ServeProcess(data_dir=root / "data", extra_env={"MODELYARD_ENGINE_STALL_SECONDS": "2"})
    serve.start("--no-demo")
    serve.wait_until_answering()
    with serve.api() as client:
        added = client.post("/api/v1/models", json={"path": str(model_dir), "name": "silent"})
        assert added.status_code == 201, added.text
    try:
        yield serve
    finally:
        serve.stop()


def _deploy_stalling(server: ServeProcess, flavor: str, stage: str, repeat: float = 0.0) -> str:
    name = f"stall-{flavor}-{stage}" + ("-repeating" if repeat else "")
    backend = STALLING_BACKEND_YAML.format(name=name, flavor=flavor, stage=stage, repeat=repeat)
    with server.api() as client:
        imported = client.post("/api/v1/backends/import", content=backend)
        assert imported.status_code in (200, 201), imported.text
        body = {"model": "silent", "name": name, "backend": name, "skip_verification": True}
        created = client.post("/api/v1/deployments", json=body)
        assert created.status_code == 201, created.text
    return name


def _events(server: ServeProcess, name: str) -> list[dict[str, Any]]:
    with server.api() as client:
        return list(client.get(f"/api/v1/deployments/{name}/events").json())


def _stall_event(server: ServeProcess, name: str) -> dict[str, Any] | None:
    return next((event for event in _events(server, name) if "no progress" in (event["reason"] or "")), None)


@pytest.mark.parametrize(
    ("flavor", "stage", "stage_name", "fix"),
    [
        ("vllm", "collective-init", "initialising NCCL between the GPUs", "NCCL_P2P_DISABLE=1"),
        ("vllm", "graph-capture", "capturing CUDA graphs", "--enforce-eager"),
        ("sglang", "weights", "loading the weights", "local NVMe disk"),
        ("sglang", "compile", "compiling (torch.compile)", "--enable-torch-compile"),
    ],
)
def test_a_start_that_stops_mid_stage_gets_an_event_naming_the_stage_and_its_fix(
    server: ServeProcess, flavor: str, stage: str, stage_name: str, fix: str
) -> None:
    name = _deploy_stalling(server, flavor, stage)
    wait_until(lambda: _stall_event(server, name) is not None, EVENT_SECONDS, f"{name}'s stall event")
    event = _stall_event(server, name)
    assert event is not None and event["to_state"] == "starting"
    assert stage_name in event["reason"] and fix in event["reason"]
    with server.api() as client:
        (instance,) = client.get(f"/api/v1/deployments/{name}").json()["instances"]
    assert instance["state"] == "starting"
    assert stage_name in (instance["diagnosis"] or "")
    with server.api() as client:
        assert client.delete(f"/api/v1/deployments/{name}").status_code == 202


@pytest.mark.parametrize(
    ("flavor", "stage", "stage_name"),
    [
        ("vllm", "weights", "loading the weights"),
        ("sglang", "graph-capture", "capturing CUDA graphs"),
    ],
)
def test_a_stuck_start_that_keeps_repeating_its_wait_lines_still_gets_the_stall_event(
    server: ServeProcess, flavor: str, stage: str, stage_name: str
) -> None:
    """The double goes on printing what a stuck engine repeats (vLLM's API server waiting for its
    engine core, its shared-memory broadcast warning; a health check answered 503) every 0.3 s:
    the log grows, but that is no progress, and the stall is still reported."""
    name = _deploy_stalling(server, flavor, stage, repeat=0.3)
    wait_until(lambda: _stall_event(server, name) is not None, EVENT_SECONDS, f"{name}'s stall event")
    event = _stall_event(server, name)
    assert event is not None and event["to_state"] == "starting" and stage_name in event["reason"]
    with server.api() as client:
        assert client.delete(f"/api/v1/deployments/{name}").status_code == 202
