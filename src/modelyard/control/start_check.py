"""After a vLLM or SGLang engine started: what it logged of its KV cache, against the estimate and
against the placement's booking.

Once the engine answers, its start log holds the lines in which it sized the KV cache
(``estimate.startup_logs.parse_log``). This records the start (``start_observations``): the
estimator's prediction for that GPU, those flags and that version, what modelyard showed for it
(corrected by earlier starts where a correction applied) and what the engine logged, so that later
estimates and placements correct by it. A replica placed by memory was booked for N tokens of KV
cache; when the engine logged fewer, the instance gets an event saying by how much, and
``/metrics`` shows it (``modelyard_kv_booking_shortfall_tokens``). What the engine took on its GPU
is checked against the bytes booked there (``booking_check.py``).

A start whose log has no such lines (another engine, a custom command) is not recorded; nothing
here can fail a start.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from modelyard.control.booking_check import check_booking
from modelyard.control.context import ControlContext
from modelyard.control.instance_store import DeploymentView
from modelyard.control.live import LiveEngine
from modelyard.control.start_observations import add_observation, load_observations
from modelyard.control.transitions import StartChecked
from modelyard.errors import ModelyardError
from modelyard.estimate import GpuSpec, estimate_memory
from modelyard.estimate.correction import apply_correction, correction_for, start_key
from modelyard.estimate.gpus import cuda_visible_total_bytes
from modelyard.estimate.startup_logs import LoggedKvCache, parse_log
from modelyard.modeldir import read_model_facts
from modelyard.store.database import Database
from modelyard.store.tables import Instance, StartObservationRow

logger = logging.getLogger(__name__)
MEMORY_ENGINES = ("vllm", "sglang")


@dataclass(frozen=True)
class StartFacts:
    """What the controller knew of one start when it launched it."""

    engine: str
    engine_version: str
    model_path: str
    parameters: list[str]
    env: dict[str, str]
    gpu: GpuSpec
    gpu_count: int
    booked_kv_tokens: int | None


def _logged(engine: str, log_path: Path) -> LoggedKvCache | None:
    try:
        return parse_log(engine, log_path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return None


def observe(
    facts: StartFacts, logged: LoggedKvCache, database: Database, now: datetime
) -> StartObservationRow:
    """The start as a row: the estimate for it (corrected by the starts before it), and the log's."""
    model = read_model_facts(Path(facts.model_path))
    estimate = estimate_memory(
        model,
        facts.engine,
        [facts.gpu] * max(1, facts.gpu_count),
        facts.parameters,
        engine_version=facts.engine_version,
        env=facts.env,
    )
    plan = estimate.plan_on_free or estimate.plan_on_total
    key = start_key(
        estimate,
        engine_version=facts.engine_version,
        architecture=model.architecture,
        parameters=facts.parameters,
    )
    earlier = load_observations(database, engine=facts.engine, engine_version=facts.engine_version, now=now)
    correction = correction_for(key, earlier, now=now)
    shown = plan.kv_cache_tokens
    if correction is not None and correction.applied:
        corrected = apply_correction(estimate, correction)
        shown = (corrected.plan_on_free or corrected.plan_on_total).kv_cache_tokens
    return StartObservationRow(
        observed_at=now,
        engine=key.engine,
        engine_version=key.engine_version,
        gpu_model=key.gpu_model,
        architecture=key.architecture,
        memory_fraction=estimate.memory_fraction,
        context_tokens=key.context_tokens,
        enforce_eager=key.enforce_eager,
        kv_dtype=key.kv_dtype,
        tensor_parallel=key.tensor_parallel,
        predicted_kv_bytes=plan.kv_cache_bytes,
        predicted_kv_tokens=plan.kv_cache_tokens,
        shown_kv_tokens=shown,
        logged_kv_bytes=logged.memory_bytes,
        logged_kv_tokens=logged.tokens,
        booked_kv_tokens=facts.booked_kv_tokens,
        predicted_weights_bytes=estimate.weights_bytes,
        logged_weights_bytes=logged.weights_bytes,
        predicted_activation_bytes=estimate.activation_bytes,
        logged_activation_bytes=logged.activation_bytes,
        predicted_non_torch_bytes=estimate.non_torch_bytes,
        logged_non_torch_bytes=logged.non_torch_bytes,
    )


@dataclass(frozen=True)
class CurrentStart:
    """The instance's row as the launch left it (its placement, GPUs and start number)."""

    uid: str
    replica_index: int
    start_number: int
    gpu_ids: list[int]
    placement: dict[str, Any]


def current_start(database: Database, instance_id: int) -> CurrentStart | None:
    with database.session() as session:
        instance = session.get(Instance, instance_id)
        if instance is None:
            return None
        return CurrentStart(
            uid=instance.uid,
            replica_index=instance.replica_index,
            start_number=instance.start_count,
            gpu_ids=list(instance.gpu_ids or []),
            placement=dict(instance.placement or {}),
        )


def start_facts(
    context: ControlContext, deployment: DeploymentView, instance: CurrentStart, engine_version: str
) -> StartFacts | None:
    """The start's engine, flags (with the knob the placement set) and GPU, or None when it is
    not one the estimator models."""
    family = context.engine_family(deployment)
    if family not in MEMORY_ENGINES:
        return None
    placement = instance.placement
    ranks = placement.get("ranks") or []
    gpu_ids = [int(gpu) for rank in ranks for gpu in rank.get("gpu_ids", [])] or list(instance.gpu_ids)
    if not gpu_ids:
        return None
    worker_id = str(ranks[0].get("worker_id")) if ranks else None
    worker = context.scheduler.worker(worker_id) if worker_id else None
    gpus = list(worker.gpus) if worker is not None else list(context.inventory.gpus)
    info = next((gpu for gpu in gpus if gpu.index == gpu_ids[0]), None)
    if info is None:
        return None
    parameters = context.secrets.reveal_arguments(deployment.backend_parameters)
    knob, fraction = placement.get("memory_knob"), placement.get("memory_fraction")
    words = " ".join(parameters).split()
    if knob and fraction is not None and not any(word.split("=")[0] == knob for word in words):
        parameters = [*parameters, f"{knob} {fraction:g}"]
    free_before = placement.get("free_before_start_bytes")
    booked = placement.get("kv_cache_tokens_booked")
    return StartFacts(
        engine=family,
        engine_version=engine_version,
        model_path=deployment.model_path,
        parameters=parameters,
        env=context.secrets.reveal_env(deployment.env),
        # CUDA's view of the GPU (NVML's total less the driver's reservation): what the knob
        # divides. SGLang's knob is a fraction of the memory free when it starts (the placement's
        # figure, already in that view): on a shared GPU, less.
        gpu=GpuSpec(
            name=info.name,
            memory_total_bytes=cuda_visible_total_bytes(info.memory_total_bytes),
            memory_free_bytes=int(free_before) if family == "sglang" and free_before else None,
        ),
        gpu_count=len(gpu_ids),
        booked_kv_tokens=int(booked) if isinstance(booked, int) else None,
    )


def shortfall_reason(booked_tokens: int, logged_tokens: int, knob: str | None) -> str:
    missing = booked_tokens - logged_tokens
    return (
        f"KV cache short of its booking: booked {booked_tokens:,} tokens, the engine logged "
        f"{logged_tokens:,} ({missing:,} tokens, {missing / booked_tokens:.1%} short); later placements "
        f"of this engine and GPU book more headroom from this start"
        + (f" (or set {knob} higher by hand)" if knob else "")
    )


async def check_start(
    context: ControlContext,
    deployment: DeploymentView,
    instance_id: int,
    engine: LiveEngine,
    engine_version: str,
) -> None:
    """Record the start's logged KV cache against the estimate; an event when short of its booking."""
    database = context.store.database
    instance = await asyncio.to_thread(current_start, database, instance_id)
    facts = None if instance is None else start_facts(context, deployment, instance, engine_version)
    if instance is None or facts is None:
        return
    logged = await asyncio.to_thread(_logged, facts.engine, engine.log_path)
    if logged is None:
        logger.info("instance %s: no KV-cache lines in %s, start not recorded", instance_id, engine.log_path)
        return
    if "used_bytes_per_gpu" not in instance.placement:  # measured once a start
        await check_booking(
            context,
            deployment,
            instance_id,
            replica_index=instance.replica_index,
            start_number=instance.start_number,
            placement=instance.placement,
            engine=facts.engine,
            logged=logged,
        )
    try:
        row = await asyncio.to_thread(observe, facts, logged, database, context.clock.now())
    except (ModelyardError, ArithmeticError, LookupError, TypeError, ValueError, OSError):
        logger.exception("instance %s: its start could not be estimated, so it is not recorded", instance_id)
        return
    row.deployment_name = deployment.name
    row.deployment_uid = deployment.uid
    row.instance_uid = instance.uid
    row.replica_index = instance.replica_index
    row.start_number = instance.start_number
    if not await asyncio.to_thread(add_observation, database, row):
        return
    context.live.forget_demands()  # placements estimate again, with this start's correction
    if facts.booked_kv_tokens is not None and logged.tokens < facts.booked_kv_tokens:
        knob = instance.placement.get("memory_knob")
        reason = shortfall_reason(facts.booked_kv_tokens, logged.tokens, knob)
        logger.warning("instance %s: %s", instance_id, reason)
        await context.transition(instance_id, StartChecked(reason=reason))
