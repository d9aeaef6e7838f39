"""A deployment placed by memory (``gpu_memory``: ``auto`` or a size), checked when it is asked for.

The controller's placement (``control/placement.py``) books the estimated bytes per GPU and sets
the engine's memory knob once the GPU is chosen, so that several deployments (or replicas) share
one GPU. Before anything is stored, this module checks that the request can be placed so at all
(an engine with a knob, GPUs asked for) and tells the doctor's preflight which knob value the
engine will get: without it, the preflight would judge vLLM by its default
``--gpu-memory-utilization`` (0.92 of the GPU) and refuse every deployment after the first.

Usage::

    placement = memory_placement(request.gpu_memory, gpus_per_replica)   # {"gpu_memory": ...} or {}
    shown = preflight_parameters(raw, engine=..., ..., gpus=replica_gpus)  # raw + the knob
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from modelyard.backends.parameters import ParsedParameters
from modelyard.control.memory_demand import KNOB_FLAGS, memory_demand, parse_gpu_memory
from modelyard.errors import InvalidInput
from modelyard.estimate import GpuSpec
from modelyard.estimate.correction import StartObservation
from modelyard.estimate.gpus import engine_view
from modelyard.hardware.gpus import GpuInfo
from modelyard.settings import DEFAULT_PLACEMENT_HEADROOM_BYTES


def memory_placement(gpu_memory: str | None, gpus_per_replica: int) -> dict[str, Any]:
    """The deployment's ``placement`` for a ``gpu_memory`` request (empty: whole GPUs)."""
    wanted = parse_gpu_memory(gpu_memory)
    if wanted is None:
        return {}
    if gpus_per_replica == 0:
        raise InvalidInput(
            "placement by memory (--gpu-memory) needs GPUs, and this deployment asks for none",
            hint="pass --gpus 1 (or more), or leave --gpu-memory out",
        )
    return {"gpu_memory": wanted}


def check_memory_engine(engine: str) -> None:
    """``InvalidInput`` for an engine the estimator does not model (it has no memory knob)."""
    if engine not in KNOB_FLAGS:
        raise InvalidInput(
            f"placement by memory (--gpu-memory) needs an engine with a memory knob (vLLM, SGLang), "
            f"not {engine}",
            hint="leave --gpu-memory out: the deployment then books whole GPUs",
        )


def bytes_per_gpu(
    *,
    parameters: ParsedParameters,
    engine: str,
    engine_version: str,
    model_path: str,
    env: dict[str, str],
    gpu_memory: int | str,
    gpu_count: int,
    reference: GpuSpec,
    observations: Sequence[StartObservation] = (),
) -> int:
    """What the controller will book on each GPU of a replica (its estimate for ``reference``,
    the largest GPU of the ready workers), for the deploy-time placement check."""
    check_memory_engine(engine)
    demand = memory_demand(
        engine=engine,
        engine_version=engine_version,
        model_path=model_path,
        parameters=parameters,
        env=env,
        gpu_memory=gpu_memory,
        gpu_count=gpu_count,
        gpu=reference,
        observations=observations,
        # The default placement headroom: a server started with another --placement-headroom books
        # that instead, and its controller decides (this check says whether one replica fits now).
        reserve_bytes=DEFAULT_PLACEMENT_HEADROOM_BYTES,
    )
    return demand.bytes_per_gpu


def preflight_parameters(
    raw_parameters: str | list[str],
    *,
    parameters: ParsedParameters,
    engine: str,
    engine_version: str,
    model_path: str,
    env: dict[str, str],
    gpu_memory: int | str,
    gpus: list[GpuInfo],
    observations: Sequence[StartObservation] = (),
) -> str | list[str]:
    """The engine's flags as the doctor should judge them: the user's, plus the knob the placement
    will set on the replica's GPU (``gpus``: those the scheduler would choose, their free memory
    as NVML reads it now). ``InvalidInput`` for an engine the estimator does not model."""
    check_memory_engine(engine)
    knob = KNOB_FLAGS[engine]
    if not gpus or parameters.given(knob):
        return raw_parameters
    gpu = min(gpus, key=lambda info: info.memory_free_bytes)
    demand = memory_demand(
        engine=engine,
        engine_version=engine_version,
        model_path=model_path,
        parameters=parameters,
        env=env,
        gpu_memory=gpu_memory,
        gpu_count=len(gpus),
        gpu=GpuSpec(name=gpu.name, memory_total_bytes=gpu.memory_total_bytes),
        observations=observations,
    )
    seen = engine_view(gpu.name, gpu.memory_total_bytes, gpu.memory_free_bytes)
    fraction = demand.fraction_for(gpu.memory_total_bytes, seen.memory_free_bytes or 0)
    added = f"{knob} {fraction:g}"
    if isinstance(raw_parameters, str):
        return f"{raw_parameters.rstrip()}\n{added}" if raw_parameters.strip() else added
    return [*raw_parameters, added]
