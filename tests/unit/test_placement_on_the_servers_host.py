"""On a cluster, a container backend runs through the server's own Docker engine: its replicas are
placed on the server's node only, never on another worker's GPUs that Docker here cannot reach."""

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


def _worker(worker_id: str, name: str, gpus: int) -> Worker:
    return Worker(
        id=worker_id,
        name=name,
        host=f"10.0.0.{len(name)}",
        gpus=tuple(
            GpuInfo(
                index=index,
                uuid=f"GPU-{worker_id}-{index}",
                name="NVIDIA L40S",
                memory_total_bytes=48 * GIB,
                memory_free_bytes=48 * GIB,
                memory_used_bytes=0,
            )
            for index in range(gpus)
        ),
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


@pytest.fixture
def scheduler() -> Scheduler:
    scheduler = Scheduler()
    scheduler.set_workers([_worker("head-id", "head", 1), _worker("b-id", "node-b", 2)])
    return scheduler


def test_a_container_is_placed_on_the_servers_node_and_waits_there_when_it_is_full(
    scheduler: Scheduler,
) -> None:
    first = decide(scheduler, _deployment(), None, on_worker="head-id")
    assert [rank.worker_id for rank in first.placement.ranks] == ["head-id"]
    scheduler.book(1, "chat/replica-0", first.placement)
    with pytest.raises(Unschedulable):
        decide(scheduler, _deployment(), None, on_worker="head-id")
    # A process engine is free to go to the other worker.
    other = decide(scheduler, _deployment(), None)
    assert [rank.worker_id for rank in other.placement.ranks] == ["b-id"]


def test_a_worker_selector_without_the_servers_node_is_refused_naming_it(scheduler: Scheduler) -> None:
    with pytest.raises(Unschedulable, match=r"do not include it \(head\)"):
        decide(scheduler, _deployment(workers=["node-b"]), None, on_worker="head-id")
    named = decide(scheduler, _deployment(workers=["head"]), None, on_worker="head-id")
    assert [rank.worker_id for rank in named.placement.ranks] == ["head-id"]


def test_a_container_cannot_span_nodes(scheduler: Scheduler) -> None:
    with pytest.raises(Unschedulable, match="cannot span nodes"):
        decide(scheduler, _deployment(nodes=2), None, on_worker="head-id")


def _labelled(scheduler: Scheduler, **labels: str) -> Scheduler:
    """The server's node with the labels its start recorded of its Docker."""
    head = replace(scheduler.workers[0], labels=labels)
    scheduler.set_workers([head, *scheduler.workers[1:]])
    return scheduler


@pytest.mark.parametrize(
    ("labels", "said"),
    [
        (
            {"modelyard.io/docker": "unreachable", "modelyard.io/docker-gpus": "none"},
            "worker head has no Docker engine (its Docker daemon did not answer when its Ray head "
            "started): start dockerd there (check DOCKER_HOST) and restart `modelyard serve --cluster`, "
            "or use a process backend",
        ),
        (
            {"modelyard.io/docker": "not-installed", "modelyard.io/docker-gpus": "none"},
            "worker head has no Docker engine (no docker command there when its Ray head started): "
            "install docker.io and restart `modelyard serve --cluster`, or use a process backend",
        ),
        (
            {"modelyard.io/docker": "ready", "modelyard.io/docker-gpus": "none"},
            "worker head's Docker has no NVIDIA runtime, so containers there cannot see its GPUs: "
            "install the NVIDIA Container Toolkit",
        ),
    ],
)
def test_a_container_on_a_node_whose_docker_cannot_run_it_is_refused_with_the_reason(
    scheduler: Scheduler, labels: dict[str, str], said: str
) -> None:
    with pytest.raises(Unschedulable) as raised:
        decide(_labelled(scheduler, **labels), _deployment(), None, on_worker="head-id")
    assert said in str(raised.value)


def test_a_container_goes_to_a_node_whose_docker_has_the_nvidia_runtime_or_that_recorded_nothing(
    scheduler: Scheduler,
) -> None:
    nvidia = {"modelyard.io/docker": "ready", "modelyard.io/docker-gpus": "nvidia"}
    placed = decide(_labelled(scheduler, **nvidia), _deployment(), None, on_worker="head-id")
    assert [rank.worker_id for rank in placed.placement.ranks] == ["head-id"]
    # A head started elsewhere (--ray-address) recorded nothing: the doctor judged the server's Docker.
    unknown = decide(_labelled(scheduler), _deployment(), None, on_worker="head-id")
    assert [rank.worker_id for rank in unknown.placement.ranks] == ["head-id"]


def test_a_container_without_gpus_needs_only_the_docker_engine(scheduler: Scheduler) -> None:
    plain = {"modelyard.io/docker": "ready", "modelyard.io/docker-gpus": "none"}
    deployment = replace(_deployment(), gpus_per_replica=0)
    placed = decide(_labelled(scheduler, **plain), deployment, None, on_worker="head-id")
    assert [rank.worker_id for rank in placed.placement.ranks] == ["head-id"]


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
