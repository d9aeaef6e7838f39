"""Deployments placed by memory (``gpu_memory``): replicas and deployments share a GPU when the
estimate says so; the doctor judges the engine by the knob the placement will set."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from modelyard.hardware.gpus import GpuInventory

from .conftest import ApiHarness, add_model, assert_error, fake_inventory

GIB = 2**30


@pytest.fixture
def busy_gpu(api: ApiHarness, tiny_model_dir: Path) -> ApiHarness:
    """One 48 GiB GPU of which another engine already holds 30 GiB."""
    add_model(api, tiny_model_dir)
    gpu = fake_inventory(1).gpus[0]
    held = replace(gpu, memory_free_bytes=gpu.memory_total_bytes - 30 * GIB, memory_used_bytes=30 * GIB)
    api.controller.inventory = GpuInventory(
        gpus=[held], driver_version="580.95.05", cuda_driver_version="13.0"
    )
    return api


def test_two_replicas_placed_by_memory_share_a_busy_gpu(busy_gpu: ApiHarness) -> None:
    api = busy_gpu
    response = api.client.post(
        "/api/v1/deployments",
        json={"model": "tiny", "backend": "vllm", "replicas": 2, "gpus_per_replica": 1, "gpu_memory": "auto"},
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["placement"] == {"gpu_memory": "auto"}
    assert body["replicas"] == 2
    grown = api.client.patch("/api/v1/deployments/tiny", json={"replicas": 3})
    assert grown.status_code == 200, grown.text


def test_without_gpu_memory_the_same_request_is_refused_by_gpu_count_and_free_memory(
    busy_gpu: ApiHarness,
) -> None:
    api = busy_gpu
    two = api.client.post(
        "/api/v1/deployments", json={"model": "tiny", "backend": "vllm", "replicas": 2, "gpus_per_replica": 1}
    )
    assert two.status_code == 409
    assert_error(two.json(), "unschedulable", "needs 2 GPU")
    one = api.client.post("/api/v1/deployments", json={"model": "tiny", "backend": "vllm"})
    assert one.status_code == 400, one.text
    assert "memory.free-memory-too-low" in one.text  # vLLM's default 0.92 of the GPU is not free


def test_a_size_books_that_much(busy_gpu: ApiHarness) -> None:
    response = busy_gpu.client.post(
        "/api/v1/deployments", json={"model": "tiny", "backend": "vllm", "gpu_memory": "6GiB"}
    )
    assert response.status_code == 201, response.text
    assert response.json()["placement"] == {"gpu_memory": 6 * GIB}


@pytest.mark.parametrize(
    ("body", "fragments"),
    [
        ({"backend": "vllm", "gpu_memory": "lots"}, ("'lots'", "20GiB")),
        ({"backend": "transformers", "gpus_per_replica": 1, "gpu_memory": "auto"}, ("vLLM, SGLang",)),
        ({"backend": "transformers", "gpus_per_replica": 0, "gpu_memory": "auto"}, ("needs GPUs",)),
    ],
)
def test_gpu_memory_that_cannot_be_placed_is_refused_with_the_fix(
    busy_gpu: ApiHarness, body: dict[str, object], fragments: tuple[str, ...]
) -> None:
    response = busy_gpu.client.post("/api/v1/deployments", json={"model": "tiny", **body})
    assert response.status_code == 400, response.text
    assert_error(response.json(), "invalid_input", *fragments)
    assert response.json()["error"]["hint"]
    assert busy_gpu.client.get("/api/v1/deployments").json() == []
