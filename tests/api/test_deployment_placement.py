"""Cluster selectors of a deployment (workers, worker labels, GPU model, hosts per replica):
stored as asked, refused with the reason when they cannot be met by any engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelyard.control.scheduler import Worker, cluster_inventory
from modelyard.hardware.gpus import GpuInfo

from .conftest import ApiHarness, add_model, assert_error, fake_inventory

GIB = 1 << 30


def gpu_double(worker: str, index: int, name: str, memory_gib: int, used_gib: int = 0) -> GpuInfo:
    """One GPU as a worker's NVML double would report it."""
    return GpuInfo(
        index=index,
        uuid=f"GPU-{worker}-{index}",
        name=name,
        memory_total_bytes=memory_gib * GIB,
        memory_free_bytes=(memory_gib - used_gib) * GIB,
        memory_used_bytes=used_gib * GIB,
    )


def worker_double(name: str, *gpus: GpuInfo, **labels: str) -> Worker:
    return Worker(id=f"node-id-{name}", name=name, host=f"10.0.0.{len(name)}", gpus=gpus, labels=labels)


def use_cluster(api: ApiHarness, *workers: Worker) -> None:
    """The controller double reports these workers (and their GPUs as the cluster's inventory)."""
    api.controller.cluster = list(workers)
    inventory = cluster_inventory(workers)
    api.controller.inventory = type(inventory)(
        gpus=inventory.gpus, driver_version="580.95.05", cuda_driver_version="13.0"
    )


@pytest.fixture
def four_gpus(api: ApiHarness, tiny_model_dir: Path) -> ApiHarness:
    add_model(api, tiny_model_dir)
    api.controller.inventory = fake_inventory(4)
    return api


def test_selectors_are_stored_in_the_placement(four_gpus: ApiHarness) -> None:
    h200 = "NVIDIA H200"
    use_cluster(
        four_gpus,
        worker_double(
            "gpu-1", gpu_double("gpu-1", 0, h200, 141), gpu_double("gpu-1", 1, h200, 141), zone="a"
        ),
        worker_double(
            "gpu-2", gpu_double("gpu-2", 0, h200, 141), gpu_double("gpu-2", 1, h200, 141), zone="a"
        ),
    )
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


# -- a cluster of mixed GPUs: the door asks the scheduler, per worker ---------------------------


@pytest.fixture
def mixed(api: ApiHarness, tiny_model_dir: Path) -> ApiHarness:
    """Worker B with two 24 GiB L4s, worker C with one 48 GiB L40S (8 GiB of it in use)."""
    add_model(api, tiny_model_dir)
    use_cluster(
        api,
        worker_double("B", gpu_double("B", 0, "NVIDIA L4", 24), gpu_double("B", 1, "NVIDIA L4", 24)),
        worker_double("C", gpu_double("C", 0, "NVIDIA L40S", 48, used_gib=8)),
    )
    return api


def by_memory(gpu_memory: str, **selectors: object) -> dict[str, object]:
    return {"model": "tiny", "backend": "vllm", "gpus_per_replica": 1, "gpu_memory": gpu_memory, **selectors}


@pytest.mark.parametrize("selectors", [{}, {"workers": ["C"]}, {"gpu_model": "L40S"}])
def test_memory_that_fits_only_the_larger_gpu_is_accepted_and_judged_on_it(
    mixed: ApiHarness, selectors: dict[str, object]
) -> None:
    response = mixed.client.post("/api/v1/deployments", json=by_memory("30GiB", **selectors))
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["placement"]["gpu_memory"] == 30 * GIB
    # The doctor judged the knob on C's L40S: no finding about a GPU too small.
    assert "L4 " not in response.text and "free-memory" not in response.text


def test_the_console_preflight_judges_the_same_gpu(mixed: ApiHarness) -> None:
    verdict = mixed.client.post("/api/v1/deployments/preflight", json=by_memory("30GiB")).json()
    assert verdict["ok"], verdict


def test_memory_that_fits_no_worker_is_refused_naming_the_best_candidate_and_its_free_memory(
    mixed: ApiHarness,
) -> None:
    response = mixed.client.post("/api/v1/deployments", json=by_memory("60GiB"))
    assert response.status_code == 409, response.text
    assert_error(
        response.json(),
        "unschedulable",
        "no worker can take one replica now: needs 60.0 GiB on one GPU",
        "the largest has 39.4 GiB (C GPU 0, NVIDIA L40S)",
    )
    assert "--gpu-memory" in response.json()["error"]["hint"]
    assert mixed.client.get("/api/v1/deployments").json() == []


def test_a_worker_whose_gpus_are_too_small_is_refused_naming_its_gpus(mixed: ApiHarness) -> None:
    response = mixed.client.post("/api/v1/deployments", json=by_memory("30GiB", workers=["B"]))
    assert response.status_code == 409, response.text
    assert_error(
        response.json(),
        "unschedulable",
        "needs 1 GPU(s) with 30.0 GiB free each on one worker; "
        "B (2 x NVIDIA L4): 0 fit, the largest has 23.4 GiB free",
    )


def test_selectors_that_fit_no_worker_name_the_closest_one_first(mixed: ApiHarness) -> None:
    response = mixed.client.post("/api/v1/deployments", json=by_memory("45GiB", workers=["B", "C"]))
    assert response.status_code == 409, response.text
    assert_error(
        response.json(),
        "unschedulable",
        "the best candidate is C (1 x NVIDIA L40S): 0 fit, the largest has 39.4 GiB free; "
        "B (2 x NVIDIA L4): 0 fit, the largest has 23.4 GiB free",
    )


def test_whole_gpus_on_a_worker_that_has_too_few_are_refused_at_the_door(mixed: ApiHarness) -> None:
    response = mixed.client.post(
        "/api/v1/deployments",
        json={"model": "tiny", "backend": "vllm", "gpus_per_replica": 2, "workers": ["C"]},
    )
    assert response.status_code == 409, response.text
    assert_error(
        response.json(), "unschedulable", "needs 2 GPU(s) on one worker; C (1 x NVIDIA L40S): 1 free"
    )
