"""Cluster selectors of a deployment (workers, worker labels, GPU model, hosts per replica):
stored as asked, refused with the reason when they cannot be met by any engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import ApiHarness, add_model, assert_error, fake_inventory


@pytest.fixture
def four_gpus(api: ApiHarness, tiny_model_dir: Path) -> ApiHarness:
    add_model(api, tiny_model_dir)
    api.controller.inventory = fake_inventory(4)
    return api


def test_selectors_are_stored_in_the_placement(four_gpus: ApiHarness) -> None:
    response = four_gpus.client.post(
        "/api/v1/deployments",
        json={
            "model": "tiny",
            "backend": "vllm",
            "gpus_per_replica": 2,
            "workers": ["gpu-1", "gpu-2"],
            "worker_labels": {"zone": "a"},
            "gpu_model": "H200",
            "nodes": 2,
        },
    )
    assert response.status_code == 201, response.text
    assert response.json()["placement"] == {
        "workers": ["gpu-1", "gpu-2"],
        "worker_labels": {"zone": "a"},
        "gpu_model": "H200",
        "nodes": 2,
    }


def test_a_replica_over_two_hosts_needs_an_engine_with_multi_node_flags(four_gpus: ApiHarness) -> None:
    response = four_gpus.client.post(
        "/api/v1/deployments",
        json={"model": "tiny", "backend": "transformers", "gpus_per_replica": 2, "nodes": 2},
    )
    assert response.status_code == 400, response.text
    assert_error(
        response.json(), "invalid_input", "has no multi-node flags, so a replica cannot span 2 hosts"
    )


def test_gpus_that_do_not_split_over_the_hosts_are_refused_with_the_counts_that_do(
    four_gpus: ApiHarness,
) -> None:
    response = four_gpus.client.post(
        "/api/v1/deployments", json={"model": "tiny", "backend": "vllm", "gpus_per_replica": 3, "nodes": 2}
    )
    assert response.status_code == 400, response.text
    assert_error(response.json(), "invalid_input", "3 GPU(s) per replica do not split evenly over 2 hosts")
    assert "--gpus 2 --nodes 2" in response.json()["error"]["hint"]


def test_a_label_with_blanks_is_refused_naming_it(four_gpus: ApiHarness) -> None:
    response = four_gpus.client.post(
        "/api/v1/deployments",
        json={"model": "tiny", "backend": "vllm", "gpus_per_replica": 1, "worker_labels": {"zone": "a b"}},
    )
    assert response.status_code == 400, response.text
    assert_error(
        response.json(),
        "invalid_input",
        "label 'zone' value 'a b' is empty, too long or has blanks or commas",
    )
