"""On a cluster, an image backend runs through the Docker engine of the worker it is placed on:
placement keeps it to the workers whose Docker can run it (as their joins recorded it), says
why each other one was left out, and refuses with the reason when none can."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from modelyard.control.instance_store import DeploymentView
from modelyard.control.placement import decide
from modelyard.control.scheduler import Scheduler, Worker
from modelyard.errors import Unschedulable
from modelyard.hardware.gpus import GpuInfo
from modelyard.runtimes.docker_capability import DockerCapability

GIB = 1 << 30


NVIDIA = {"modelyard.io/docker": "ready", "modelyard.io/docker-gpus": "nvidia"}
NO_GPU_RUNTIME = {"modelyard.io/docker": "ready", "modelyard.io/docker-gpus": "none"}
UNREACHABLE = {"modelyard.io/docker": "unreachable", "modelyard.io/docker-gpus": "none"}
NOT_INSTALLED = {"modelyard.io/docker": "not-installed", "modelyard.io/docker-gpus": "none"}


def _worker(
    worker_id: str, name: str, gpus: int, memory_gib: int = 48, labels: dict[str, str] | None = None
) -> Worker:
    return Worker(
        id=worker_id,
        name=name,
        host=f"10.0.0.{len(name)}",
        gpus=tuple(
            GpuInfo(
                index=index,
                uuid=f"GPU-{worker_id}-{index}",
                name="NVIDIA L40S" if memory_gib == 48 else "NVIDIA H100",
                memory_total_bytes=memory_gib * GIB,
                memory_free_bytes=memory_gib * GIB,
                memory_used_bytes=0,
            )
            for index in range(gpus)
        ),
        labels=labels or {},
    )


def _deployment(**placement: Any) -> DeploymentView:
    return DeploymentView(
        id=1,
        uid="d1",
        name="chat",
        desired_state="running",
        replicas=1,
        backend="vllm-docker",
        backend_version="v0.19.1",
        gpus_per_replica=1,
        gpu_ids=None,
        backend_parameters=[],
        env={},
        skip_verification=True,
        model_path="/models/chat",
        model_details={},
        instances=[],
        placement=placement,
    )


def _cluster(head: dict[str, str], node_b: dict[str, str]) -> Scheduler:
    """The server's node (one 80 GiB GPU: a whole-GPU replica would go there first) and node-b
    (two 48 GiB GPUs), with what each one's Docker can do."""
    scheduler = Scheduler()
    scheduler.set_workers(
        [_worker("head-id", "head", 1, 80, head), _worker("b-id", "node-b", 2, labels=node_b)]
    )
    return scheduler


def _workers_of(decision_ranks: Any) -> list[str]:
    return [rank.worker_id for rank in decision_ranks]


def test_an_image_backend_goes_to_a_worker_whose_docker_can_run_it_and_a_process_anywhere() -> None:
    scheduler = _cluster(head=NO_GPU_RUNTIME, node_b=NVIDIA)
    container = decide(scheduler, _deployment(), None, in_container=True, server_worker="head-id")
    assert _workers_of(container.placement.ranks) == ["b-id"]
    process = decide(scheduler, _deployment(), None, server_worker="head-id")
    assert _workers_of(process.placement.ranks) == ["head-id"]


def test_a_full_able_worker_is_refused_naming_the_workers_left_out_and_why() -> None:
    scheduler = _cluster(head=NO_GPU_RUNTIME, node_b=NVIDIA)
    for instance_id in (1, 2):
        placed = decide(scheduler, _deployment(), None, in_container=True, server_worker="head-id")
        scheduler.book(instance_id, f"chat/replica-{instance_id}", placed.placement)
    with pytest.raises(Unschedulable) as raised:
        decide(scheduler, _deployment(), None, in_container=True, server_worker="head-id")
    said = str(raised.value)
    assert "node-b" in said
    assert "not considered for an image backend: worker head's Docker has no NVIDIA runtime" in said


@pytest.mark.parametrize(
    ("labels", "said"),
    [
        (
            UNREACHABLE,
            "worker head has no Docker engine (its Docker daemon did not answer when its Ray head "
            "started): start dockerd there (check DOCKER_HOST) and restart `modelyard serve --cluster`, "
            "or use a process backend",
        ),
        (
            NOT_INSTALLED,
            "worker head has no Docker engine (no docker command there when its Ray head started): "
            "install docker.io and restart `modelyard serve --cluster`, or use a process backend",
        ),
        (
            NO_GPU_RUNTIME,
            "worker head's Docker has no NVIDIA runtime, so containers there cannot see its GPUs: "
            "install the NVIDIA Container Toolkit",
        ),
    ],
)
def test_when_no_worker_can_run_it_the_refusal_gives_the_reason(labels: dict[str, str], said: str) -> None:
    scheduler = _cluster(head=labels, node_b=UNREACHABLE)
    with pytest.raises(Unschedulable) as raised:
        decide(scheduler, _deployment(), None, in_container=True, server_worker="head-id")
    assert said in str(raised.value)
    assert "and 1 more worker(s) like it" in str(raised.value)


def test_another_workers_refusal_says_to_join_it_again() -> None:
    scheduler = _cluster(head=NVIDIA, node_b=UNREACHABLE)
    with pytest.raises(Unschedulable, match=r"worker node-b has no Docker engine .* and re-join"):
        decide(scheduler, _deployment(workers=["node-b"]), None, in_container=True, server_worker="head-id")


def test_a_worker_selector_keeps_to_the_able_workers_it_names() -> None:
    scheduler = _cluster(head=NVIDIA, node_b=NVIDIA)
    named = decide(
        scheduler, _deployment(workers=["node-b"]), None, in_container=True, server_worker="head-id"
    )
    assert _workers_of(named.placement.ranks) == ["b-id"]


def test_an_image_backend_cannot_span_nodes() -> None:
    with pytest.raises(Unschedulable, match="cannot span nodes"):
        decide(_cluster(NVIDIA, NVIDIA), _deployment(nodes=2), None, in_container=True)


def test_a_worker_that_recorded_nothing_is_not_judged() -> None:
    # A head started elsewhere (--ray-address) recorded nothing: the doctor judged the server's Docker.
    scheduler = _cluster(head={}, node_b=UNREACHABLE)
    placed = decide(scheduler, _deployment(), None, in_container=True, server_worker="head-id")
    assert _workers_of(placed.placement.ranks) == ["head-id"]


def test_an_image_backend_without_gpus_needs_only_the_docker_engine() -> None:
    scheduler = _cluster(head=NO_GPU_RUNTIME, node_b=UNREACHABLE)
    deployment = replace(_deployment(), gpus_per_replica=0)
    placed = decide(scheduler, deployment, None, in_container=True, server_worker="head-id")
    assert _workers_of(placed.placement.ranks) == ["head-id"]


def test_what_a_join_finds_of_docker_travels_as_labels_and_back() -> None:
    for capability in (
        DockerCapability("ready", "nvidia"),
        DockerCapability("ready", "cdi"),
        DockerCapability("unreachable"),
        DockerCapability("not-installed"),
    ):
        assert DockerCapability.from_labels(capability.labels()) == capability
    assert DockerCapability.from_labels({"zone": "a"}) is None
    missing = DockerCapability.detect(executable="no-such-docker-command")
    assert missing.engine == "not-installed" and "is not on PATH" in str(missing.detail)
