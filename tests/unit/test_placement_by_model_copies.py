"""On a cluster, a replica goes only to workers that have its model's files (``verified`` or
``present``, as the survey of the workers found them); where none may take it, it waits with the
workers that lack them and the ``models push`` command that copies them there."""

from __future__ import annotations

from typing import Any

import pytest

from modelyard.control.instance_store import DeploymentView
from modelyard.control.placement import decide
from modelyard.control.scheduler import Scheduler, Worker
from modelyard.errors import Unschedulable
from modelyard.hardware.gpus import GpuInfo

GIB = 1 << 30


def _worker(name: str) -> Worker:
    gpu = GpuInfo(
        index=0,
        uuid=f"GPU-{name}",
        name="NVIDIA L4",
        memory_total_bytes=24 * GIB,
        memory_free_bytes=24 * GIB,
        memory_used_bytes=0,
    )
    return Worker(id=f"id-{name}", name=name, host=f"10.0.0.{len(name)}", gpus=(gpu,))


def _scheduler() -> Scheduler:
    scheduler = Scheduler()
    scheduler.set_workers([_worker("gpu-1"), _worker("gpu-2"), _worker("gpu-3")])
    return scheduler


def _deployment(copies: dict[str, str] | None, **placement: Any) -> DeploymentView:
    return DeploymentView(
        id=1,
        uid="d1",
        name="chat",
        desired_state="running",
        replicas=1,
        backend="vllm",
        backend_version="0.25.0",
        gpus_per_replica=1,
        gpu_ids=None,
        backend_parameters=[],
        env={},
        skip_verification=True,
        model_path="/models/qwen",
        model_details={},
        instances=[],
        placement=placement,
        model_name="qwen",
        model_copies=copies,
    )


def test_a_replica_goes_to_the_worker_that_has_the_files() -> None:
    copies = {"gpu-1": "missing", "gpu-2": "incomplete", "gpu-3": "verified"}
    decision = decide(_scheduler(), _deployment(copies), None)
    assert decision.placement.ranks[0].worker_name == "gpu-3"


def test_a_copy_present_but_not_verified_will_do() -> None:
    decision = decide(_scheduler(), _deployment({"gpu-2": "present"}), None)
    assert decision.placement.ranks[0].worker_name == "gpu-2"


def test_without_a_copy_on_the_workers_it_may_use_it_waits_naming_the_push_command() -> None:
    copies = {"gpu-1": "verified", "gpu-2": "missing", "gpu-3": "damaged"}
    with pytest.raises(Unschedulable) as refused:
        decide(_scheduler(), _deployment(copies, workers=["gpu-2", "gpu-3"]), None)
    assert str(refused.value) == (
        "the files of model qwen are on none of the workers it may use (gpu-2: missing, gpu-3: damaged); "
        "copy them there: modelyard models push qwen --worker gpu-2 --worker gpu-3"
    )


def test_a_worker_not_looked_at_yet_is_named_so() -> None:
    with pytest.raises(Unschedulable, match=r"\(gpu-2: not looked at yet\)"):
        decide(_scheduler(), _deployment({"gpu-1": "verified"}, workers=["gpu-2"]), None)


def test_where_no_worker_was_looked_at_nothing_is_narrowed() -> None:
    decision = decide(_scheduler(), _deployment(None, workers=["gpu-2"]), None)
    assert decision.placement.ranks[0].worker_name == "gpu-2"
