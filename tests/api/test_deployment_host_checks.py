"""The host checks at deploy time read the deployment's parsed flags: tensor parallelism from
``--tensor-parallel-size`` (not from the GPU count), speculative decoding from its flags (not from
the text ``--speculative`` anywhere in the parameters)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from modelyard.hardware.gpus import GpuInventory

from .conftest import ApiHarness, add_model, fake_gpu

NARROW_LINK = "host.pcie-narrow-link"


@pytest.fixture
def narrow_pair(api: ApiHarness, tiny_model_dir: Path) -> ApiHarness:
    """Two GPUs without NVLink in gen3 x8 slots: tensor parallelism over them is worth a warning."""
    add_model(api, tiny_model_dir)
    gpus = [replace(fake_gpu(index), pcie_max_width=8, pcie_max_generation=3) for index in range(2)]
    api.controller.inventory = GpuInventory(gpus=gpus, driver_version="580.95.05", cuda_driver_version="13.0")
    return api


def _deploy(api: ApiHarness, parameters: str) -> list[dict[str, Any]]:
    response = api.client.post(
        "/api/v1/deployments",
        json={"model": "tiny", "backend": "vllm", "gpus_per_replica": 2, "backend_parameters": parameters},
    )
    assert response.status_code == 201, response.text
    warnings: list[dict[str, Any]] = response.json()["warnings"]
    return warnings


def _narrow_link(warnings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [warning for warning in warnings if warning["check_id"] == NARROW_LINK]


def test_two_gpus_of_pipeline_stages_are_not_judged_as_tensor_parallel(narrow_pair: ApiHarness) -> None:
    # PP 2 and TP 1: nothing is all-reduced across the narrow link each layer.
    assert _narrow_link(_deploy(narrow_pair, "--pipeline-parallel-size 2")) == []


def test_tensor_parallel_over_a_narrow_link_is_warned(narrow_pair: ApiHarness) -> None:
    (warning,) = _narrow_link(_deploy(narrow_pair, "-tp 2"))
    assert "tensor parallelism over 2 GPUs" in warning["message"]
    assert "speculative" not in warning["message"]


def test_speculative_decoding_is_read_from_its_flag(narrow_pair: ApiHarness) -> None:
    config = '{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 4}'
    parameters = f"--tensor-parallel-size 2 --speculative-config '{config}'"
    (warning,) = _narrow_link(_deploy(narrow_pair, parameters))
    assert "speculative decoding adds a draft step" in warning["message"]


def test_a_value_that_mentions_speculative_is_not_speculative_decoding(narrow_pair: ApiHarness) -> None:
    (warning,) = _narrow_link(
        _deploy(narrow_pair, "--tensor-parallel-size 2 --tokenizer-revision main--speculative")
    )
    assert "speculative" not in warning["message"]
