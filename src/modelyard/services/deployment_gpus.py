"""The GPUs one replica of a new deployment would get: asked of the scheduler at the door.

Before anything is stored, ``deployments.check_deployment`` asks a scheduler that holds the
workers as the controller last read them (one, ``local``, on a single host) where one replica
would go now, honouring the deployment's selectors (workers, worker labels, GPU model, GPU ids,
nodes) and, when it is placed by memory, its bytes per GPU. The doctor then judges the engine
against those GPUs (a 30 GiB request is judged on the worker with the 48 GiB GPU, not on the
first worker's 24 GiB ones). The scheduler holds no bookings here: other deployments' engines
may end, and what they use now is already out of each GPU's free memory as NVML reads it; only
the hardware and that use decide. A request that fits no worker is refused with the scheduler's
reason: the best candidate and what it has against what is needed.

Usage::

    chosen = replica_gpus(workers, {"workers": ["gpu-2"]}, gpus_per_replica=1, gpu_ids=None,
                          memory_bytes_per_gpu=30 << 30)
    chosen.worker.name, [gpu.index for gpu in chosen.gpus]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from modelyard.control.placement import container_request, reference_gpu, request_for
from modelyard.control.scheduler import Scheduler, Worker
from modelyard.errors import Unschedulable
from modelyard.estimate import GpuSpec
from modelyard.hardware.gpus import GpuInfo


@dataclass(frozen=True)
class ReplicaGpus:
    """Where rank 0 of one replica would run now, and its GPUs there."""

    worker: Worker
    gpus: list[GpuInfo]


def replica_gpus(
    workers: list[Worker],
    selectors: Mapping[str, Any],
    *,
    gpus_per_replica: int,
    gpu_ids: list[int] | None,
    memory_bytes_per_gpu: int | None,
    in_container: bool = False,
) -> ReplicaGpus:
    """The scheduler's choice for one replica on ``workers`` with no bookings; ``Unschedulable``
    with its reason (the best candidate, free against needed) when none can take it.
    ``in_container``: an image backend, only on workers whose Docker can run it."""
    scheduler = Scheduler()
    scheduler.set_workers(workers)
    request = request_for(selectors, gpus_per_replica, gpu_ids, memory_bytes_per_gpu)
    try:
        if in_container:
            request, _ = container_request(scheduler, request)
        placement = scheduler.place(request)
    except Unschedulable as error:
        if memory_bytes_per_gpu is not None:
            hint = (
                "ask for less (--gpu-memory), or choose a worker with larger GPUs (--worker, "
                "--gpu-model); `modelyard workers` lists each worker's GPUs"
            )
        else:
            hint = "ask for fewer GPUs or change the selectors; `modelyard workers` lists each worker's GPUs"
        raise Unschedulable(f"no worker can take one replica now: {error.message}", hint=hint) from error
    rank = placement.ranks[0]
    worker = scheduler.worker(rank.worker_id)
    if worker is None:  # placed on a worker the scheduler holds: cannot happen
        raise Unschedulable(f"worker {rank.worker_name} vanished while placing")
    return ReplicaGpus(worker=worker, gpus=[gpu for gpu in worker.gpus if gpu.index in rank.gpu_ids])


def estimate_reference(workers: list[Worker]) -> GpuSpec:
    """The GPU kind a memory estimate is made for (as the controller makes it)."""
    reference = reference_gpu(workers)
    if reference is None:
        raise Unschedulable(
            "placement by memory needs GPUs, and no ready worker has one",
            hint="join a worker with GPUs (modelyard worker join), or leave --gpu-memory out",
        )
    return reference
