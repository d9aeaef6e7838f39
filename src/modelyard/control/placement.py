"""Placement as the controller does it: a deployment's request, its memory demand, the decision.

``scheduler.Scheduler`` holds the workers and the bookings (booked when a launch is recorded,
released when the engine is gone); this module turns a deployment into a ``PlacementRequest``
(GPUs per rank, ranks, memory from the estimator, selectors), asks the scheduler, and says
which knob value the engine gets. The estimate (``demand_of``: it reads the model's headers)
runs off the event loop (``asyncio.to_thread``); ``decide`` takes microseconds and runs on it,
where the bookings change. A refused instance is not placed again until the scheduler's ``epoch``
changes (a GPU freed, a worker joined or left, GPUs read again).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from modelyard.control.instance_store import DeploymentView
from modelyard.control.memory_demand import MemoryDemand, memory_demand, parse_gpu_memory
from modelyard.control.scheduler import SHOWN_IN_REASON, Placement, PlacementRequest, Scheduler, Worker
from modelyard.errors import InvalidInput, Unschedulable
from modelyard.estimate import GpuSpec
from modelyard.estimate.correction import StartObservation
from modelyard.estimate.gpus import cuda_visible_total_bytes
from modelyard.runtimes.docker_capability import container_refusal
from modelyard.settings import ENV_PLACEMENT_HEADROOM

GIB = 1 << 30

__all__ = [
    "Decision",
    "Scheduler",
    "container_request",
    "decide",
    "demand_of",
    "placement_request",
    "placement_to_json",
    "reference_gpu",
    "request_for",
]


@dataclass(frozen=True)
class Decision:
    placement: Placement
    demand: MemoryDemand | None = None
    # The knob's value on rank 0's GPU (set from the estimate), when placed by memory.
    memory_fraction: float | None = None
    # Free on that GPU once its other engines hold their bookings (SGLang's knob is a share of it).
    free_before_start_bytes: int | None = None

    def knob_arguments(self, parameters: list[str]) -> list[str]:
        """The knob flag to add to the engine's arguments (none when the user set it)."""
        if self.demand is None or self.memory_fraction is None or self.demand.fixed_fraction is not None:
            return []
        knob = self.demand.knob
        if any(argument == knob or argument.startswith(knob + "=") for argument in parameters):
            return []
        return [knob, f"{self.memory_fraction:g}"]


def placement_request(deployment: DeploymentView, memory_bytes_per_gpu: int | None) -> PlacementRequest:
    return request_for(
        deployment.placement, deployment.gpus_per_replica, deployment.gpu_ids, memory_bytes_per_gpu
    )


def request_for(
    selectors: Mapping[str, Any],
    gpus_per_replica: int,
    gpu_ids: list[int] | None,
    memory_bytes_per_gpu: int | None,
) -> PlacementRequest:
    """One replica's request from a deployment's stored ``placement`` (selectors, ``nodes``) and
    GPUs: what the controller asks at each start and the deploy-time check asks once."""
    nodes = selectors.get("nodes", 1)
    ranks = nodes if isinstance(nodes, int) and nodes >= 1 else 1
    labels = selectors.get("worker_labels") or {}
    workers = selectors.get("workers") or []
    gpu_model = selectors.get("gpu_model") or None
    gpus = len(gpu_ids) if gpu_ids else gpus_per_replica
    return PlacementRequest(
        gpus_per_rank=gpus // ranks if ranks > 1 else gpus,
        ranks=ranks,
        memory_bytes_per_gpu=memory_bytes_per_gpu,
        gpu_ids=tuple(gpu_ids) if gpu_ids else None,
        workers=tuple(str(worker) for worker in workers),
        labels={str(key): str(value) for key, value in labels.items()},
        gpu_model=str(gpu_model) if gpu_model else None,
    )


def reference_gpu(workers: list[Worker]) -> GpuSpec | None:
    """The GPU kind the estimate is made for: the largest of the ready workers'."""
    gpus = [gpu for worker in workers if worker.ready for gpu in worker.gpus]
    if not gpus:
        return None
    largest = max(gpus, key=lambda gpu: gpu.memory_total_bytes)
    return GpuSpec(name=largest.name, memory_total_bytes=largest.memory_total_bytes)


def demand_of(
    workers: list[Worker],
    deployment: DeploymentView,
    *,
    engine: str | None,
    engine_version: str,
    parameters: list[str],
    env: dict[str, str],
    observations: Sequence[StartObservation] = (),
    now: datetime | None = None,
    reserve_bytes: int = 0,
) -> MemoryDemand | None:
    """The replica's memory demand per GPU (None: whole GPUs). Reads the model directory's
    headers: run it in a thread. ``Unschedulable`` when it cannot be estimated. ``observations``:
    this installation's starts of the engine version, whose correction sets the headroom.
    ``reserve_bytes``: the placement headroom (``Settings.placement_headroom_bytes``)."""
    wanted = parse_gpu_memory(deployment.placement.get("gpu_memory"))
    gpus = len(deployment.gpu_ids) if deployment.gpu_ids else deployment.gpus_per_replica
    if wanted is None or gpus == 0:
        return None
    reference = reference_gpu(workers)
    if reference is None:
        raise Unschedulable("placement by memory needs GPUs, and no ready worker has one")
    try:
        return memory_demand(
            engine=engine or "custom",
            engine_version=engine_version,
            model_path=deployment.model_path,
            parameters=parameters,
            env=env,
            gpu_memory=wanted,
            gpu_count=gpus,
            gpu=reference,
            observations=observations,
            now=now,
            reserve_bytes=reserve_bytes,
        )
    except InvalidInput as error:
        raise Unschedulable(f"cannot estimate the memory it needs: {error.message}") from error


def container_request(
    scheduler: Scheduler, request: PlacementRequest, *, server_worker: str | None = None
) -> tuple[PlacementRequest, list[str]]:
    """``request`` for an image backend: kept to the workers whose Docker can run it, as their
    joins recorded (``container_refusal``: no Docker engine, or GPUs asked for and no NVIDIA
    runtime), and why each other one was left out. ``Unschedulable`` when none can.
    ``server_worker``: the server's own node (its refusal says to restart the server, not re-join)."""
    if request.ranks > 1:
        raise Unschedulable(
            "an image backend runs one container per replica and cannot span nodes: use --nodes 1, "
            "or a backend version that runs a process"
        )
    wanted = set(request.workers)
    able: list[str] = []
    refusals: list[str] = []
    for worker in scheduler.workers:
        if not worker.ready or (wanted and not wanted & {worker.id, worker.name}):
            continue
        refusal = container_refusal(
            worker.name,
            worker.labels,
            needs_gpus=request.gpus_per_rank > 0,
            server_node=worker.id == server_worker,
        )
        if refusal is None:
            able.append(worker.id)
        else:
            refusals.append(refusal)
    if not refusals:
        return request, []
    if not able:
        others = f" (and {len(refusals) - 1} more worker(s) like it)" if len(refusals) > 1 else ""
        raise Unschedulable(f"no worker can run this image backend: {refusals[0]}{others}")
    return replace(request, workers=tuple(able)), refusals


def _place(scheduler: Scheduler, request: PlacementRequest, left_out: list[str]) -> Placement:
    """``scheduler.place``; a refusal also says which workers an image backend could not use."""
    try:
        return scheduler.place(request)
    except Unschedulable as error:
        if not left_out:
            raise
        shown = "; ".join(left_out[:SHOWN_IN_REASON])
        more = f"; and {len(left_out) - SHOWN_IN_REASON} more" if len(left_out) > SHOWN_IN_REASON else ""
        raise Unschedulable(
            f"{error.message}; not considered for an image backend: {shown}{more}", hint=error.hint
        ) from error


# Copies a replica may be placed on (``cluster/model_copies.SERVABLE_STATES``).
_SERVABLE_COPIES = ("verified", "present")
COPIES_SHOWN = 3


def with_model_copies(
    scheduler: Scheduler, request: PlacementRequest, model_name: str, copies: Mapping[str, str] | None
) -> PlacementRequest:
    """``request`` kept to the workers that have the model's files (verified or present), as
    the survey of the workers last found them; ``Unschedulable`` naming the workers that lack
    them and the command that copies them there. ``copies`` None: no worker was looked at, so
    nothing is known and nothing is narrowed (a single host)."""
    if copies is None:
        return request
    allowed = [worker for worker in scheduler.workers if worker.ready and worker.gpus]
    if request.workers:
        wanted = set(request.workers)
        allowed = [worker for worker in allowed if worker.id in wanted or worker.name in wanted]
    if request.labels:
        allowed = [
            worker
            for worker in allowed
            if all(worker.labels.get(key) == value for key, value in request.labels.items())
        ]
    having = [worker for worker in allowed if copies.get(worker.name) in _SERVABLE_COPIES]
    if having:
        chosen = tuple(worker.id for worker in having)
        return replace(request, workers=chosen)
    if not allowed:
        return request  # no worker may take it at all: the scheduler says why
    lacking = [worker.name for worker in allowed]
    shown = ", ".join(
        f"{name}: {copies.get(name, 'not looked at yet')}" for name in lacking[:COPIES_SHOWN]
    ) + (f" and {len(lacking) - COPIES_SHOWN} more" if len(lacking) > COPIES_SHOWN else "")
    command = f"modelyard models push {model_name} " + " ".join(
        f"--worker {name}" for name in lacking[:COPIES_SHOWN]
    )
    return_reason = (
        f"the files of model {model_name} are on none of the workers it may use ({shown}); "
        f"copy them there: {command}"
    )
    raise Unschedulable(return_reason)


def decide(
    scheduler: Scheduler,
    deployment: DeploymentView,
    demand: MemoryDemand | None,
    *,
    in_container: bool = False,
    server_worker: str | None = None,
) -> Decision:
    """Where the next start of ``deployment``'s replica goes (microseconds: it runs on the loop,
    where the bookings change); ``Unschedulable`` with a bounded reason. ``in_container``: an
    image backend, kept to the workers whose Docker can run it (``container_request``)."""
    request = placement_request(deployment, None if demand is None else demand.bytes_per_gpu)
    left_out: list[str] = []
    if in_container:
        request, left_out = container_request(scheduler, request, server_worker=server_worker)
    request = with_model_copies(scheduler, request, deployment.model_name, deployment.model_copies)
    if demand is None:
        return Decision(placement=_place(scheduler, request, left_out))
    try:
        placement = _place(scheduler, request, left_out)
    except Unschedulable as error:
        if not demand.reserve_bytes:
            raise
        raise Unschedulable(
            f"{error.message} (that includes the placement headroom of {demand.reserve_bytes / GIB:.2f} GiB "
            f"per GPU, {ENV_PLACEMENT_HEADROOM})",
            hint=error.hint,
        ) from error
    rank = placement.ranks[0]
    worker = scheduler.worker(rank.worker_id)
    assert worker is not None, rank  # placed just now, on the workers the scheduler holds
    gpu = next(gpu for gpu in worker.gpus if gpu.index == rank.gpu_ids[0])
    free = scheduler.free_bytes(rank.worker_id, rank.gpu_ids[0]) or cuda_visible_total_bytes(
        gpu.memory_total_bytes
    )
    fraction = demand.fraction_for(gpu.memory_total_bytes, free)
    booked = demand.bytes_per_gpu
    if demand.engine == "vllm" and demand.fixed_fraction is None:
        # What vLLM takes at that knob: its share of CUDA's total (NVML's less the driver's
        # reservation), as ``request_memory`` rounds it, plus what lives outside the knob.
        engine_total = cuda_visible_total_bytes(gpu.memory_total_bytes)
        booked = math.ceil(fraction * engine_total) + demand.outside_budget_bytes
    return Decision(
        placement=Placement(ranks=placement.ranks, memory_bytes_per_gpu=max(booked, demand.bytes_per_gpu)),
        demand=demand,
        memory_fraction=fraction,
        free_before_start_bytes=free,
    )


def placement_to_json(decision: Decision) -> dict[str, Any]:
    """What an instance records of where its start runs (shown by the API and ``ps``)."""
    data: dict[str, Any] = {
        "ranks": [rank.to_json() for rank in decision.placement.ranks],
        "memory_bytes_per_gpu": decision.placement.memory_bytes_per_gpu,
    }
    if decision.demand is not None:
        data.update(
            memory_knob=decision.demand.knob,
            memory_fraction=decision.memory_fraction,
            demand=decision.demand.summary(),
            kv_cache_tokens_booked=decision.demand.kv_tokens_booked,
            headroom_bytes=decision.demand.headroom_bytes,
            placement_headroom_bytes=decision.demand.reserve_bytes,
            free_before_start_bytes=decision.free_before_start_bytes,
        )
    return data


def placement_from_json(data: dict[str, Any] | None, fallback_host: str, gpu_ids: list[int]) -> Placement:
    """An instance's recorded placement (a row from before clusters: this host)."""
    from modelyard.control.scheduler import LOCAL_WORKER, RankPlacement

    if not data or not data.get("ranks"):
        return Placement(ranks=(RankPlacement(LOCAL_WORKER, LOCAL_WORKER, fallback_host, tuple(gpu_ids)),))
    ranks = tuple(
        RankPlacement(
            worker_id=str(rank.get("worker_id", LOCAL_WORKER)),
            worker_name=str(rank.get("worker_name", "")),
            host=str(rank.get("host", fallback_host)),
            gpu_ids=tuple(int(index) for index in rank.get("gpu_ids", [])),
        )
        for rank in data["ranks"]
    )
    memory = data.get("memory_bytes_per_gpu")
    return Placement(ranks=ranks, memory_bytes_per_gpu=memory if isinstance(memory, int) else None)
