"""After an engine placed by memory started: what it took on its GPU against what was booked.

A placement by memory (``memory_demand.py``) books the estimate, plus the placement headroom
(``serve --placement-headroom``, ``MODELYARD_PLACEMENT_HEADROOM_GIB``), on each GPU of the replica.
Once the engine has started, its log says what it took (``estimate.startup_logs.parse_log``'s
``used_bytes``: vLLM 0.18+'s "Actual usage is ..." line with its KV cache, SGLang's "avail mem"
from its first line to its last), plus what its log does not count (``UNLOGGED_BYTES``, measured
on real starts). ``check_booking`` compares the two:

- the instance's placement keeps ``booked_bytes_per_gpu`` and ``used_bytes_per_gpu``, which
  ``/metrics`` shows (``modelyard_memory_booking_error_bytes``: used minus booked, + when over);
- when the engine took more than its booking (so more than the estimate and the headroom), the
  instance gets an event naming the deployment, the GPU, the booked and the used GiB, and the
  GPU's booking becomes the measured figure, for every later placement on that GPU (and after a
  restart of the server: the placement is stored).

Nothing here can fail a start.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import selectinload

from modelyard.control.context import ControlContext
from modelyard.control.instance_store import DeploymentView
from modelyard.control.placement import placement_from_json
from modelyard.control.transitions import StartChecked
from modelyard.estimate.overheads import CUDA_CONTEXT_BYTES
from modelyard.estimate.startup_logs import LoggedKvCache
from modelyard.settings import ENV_PLACEMENT_HEADROOM
from modelyard.store.database import Database
from modelyard.store.tables import Instance

GIB = 1 << 30

logger = logging.getLogger(__name__)


# What an engine's process holds on its GPU beyond what its log counts, measured on the memory
# sweeps (tests/estimate/sweep/cases: 18 vLLM 0.25.0 and 18 SGLang 0.5.17 starts on an H200, each
# alone on the GPU): the median of nvidia-smi's used memory at ready, less the 0.6 GiB no process
# holds (docs/field-tests/h200-2026-12-02: 57.3 GiB used, 56.7 GiB in the three engines), less the
# log's figure. vLLM: its CUDA context (the log's breakdown is otherwise complete); SGLang: its
# context and what it takes after its last "avail mem" line. tests/control/test_booking_check.py
# recomputes both from the cases.
NVML_BASELINE_BYTES = int(0.6 * GIB)
UNLOGGED_BYTES = {"vllm": CUDA_CONTEXT_BYTES, "sglang": int(1.1 * GIB)}


def engine_used_bytes(engine: str, logged: LoggedKvCache) -> int | None:
    """What the engine holds on one GPU, its CUDA context included; None: its log does not say."""
    if logged.used_bytes is None:
        return None
    return logged.used_bytes + UNLOGGED_BYTES.get(engine, CUDA_CONTEXT_BYTES)


def where(placement: dict[str, Any]) -> str:
    """``worker local GPU 0`` for the placement's first rank (the one the knob was set for)."""
    ranks = placement.get("ranks") or [{}]
    rank = ranks[0]
    gpus = ",".join(str(gpu) for gpu in rank.get("gpu_ids", [])) or "?"
    return f"worker {rank.get('worker_name') or rank.get('worker_id') or 'local'} GPU {gpus}"


def over_booking_reason(
    deployment: str, replica: int, placement: dict[str, Any], booked_bytes: int, used_bytes: int
) -> str:
    over = used_bytes - booked_bytes
    reserve = placement.get("placement_headroom_bytes")
    headroom = (
        f"its placement headroom of {reserve / GIB:.2f} GiB ({ENV_PLACEMENT_HEADROOM})"
        if isinstance(reserve, int) and reserve
        else f"a placement headroom ({ENV_PLACEMENT_HEADROOM} is 0 or the size was given)"
    )
    return (
        f"GPU memory over its booking: deployment {deployment} replica {replica} on {where(placement)} "
        f"uses {used_bytes / GIB:.2f} GiB (as its engine logged), booked {booked_bytes / GIB:.2f} GiB: "
        f"{over / GIB:.2f} GiB over the estimate and {headroom}; later placements on this GPU count "
        f"{used_bytes / GIB:.2f} GiB for it"
    )


def store_measurement(
    database: Database, instance_id: int, start_number: int, placement: dict[str, Any]
) -> bool:
    """Write the placement with the measurement, if the instance is still at that start."""
    with database.session() as session:
        instance = session.get(Instance, instance_id)
        if instance is None or instance.start_count != start_number:
            return False
        instance.placement = placement
        session.commit()
        return True


async def check_booking(
    context: ControlContext,
    deployment: DeploymentView,
    instance_id: int,
    *,
    replica_index: int,
    start_number: int,
    placement: dict[str, Any],
    engine: str,
    logged: LoggedKvCache,
) -> None:
    """Compare what the started engine took with its booking (placements by memory only)."""
    booked = placement.get("memory_bytes_per_gpu")
    used = engine_used_bytes(engine, logged)
    if not placement.get("memory_knob") or not isinstance(booked, int) or used is None:
        return
    measured = {**placement, "booked_bytes_per_gpu": booked, "used_bytes_per_gpu": used}
    over = used > booked
    if over:
        measured["memory_bytes_per_gpu"] = used
    if not await asyncio.to_thread(
        store_measurement, context.store.database, instance_id, start_number, measured
    ):
        return
    if not over:
        return
    context.scheduler.book(
        instance_id,
        f"{deployment.name}/replica-{replica_index}",
        placement_from_json(measured, "127.0.0.1", []),
    )
    reason = over_booking_reason(deployment.name, replica_index, placement, booked, used)
    logger.warning("instance %s: %s", instance_id, reason)
    await context.transition(instance_id, StartChecked(reason=reason))


@dataclass(frozen=True)
class BookingMeasurement:
    """One running replica's booking against what its engine took (``/metrics``)."""

    deployment: str
    replica: int
    worker: str
    gpu: str
    booked_bytes: int
    used_bytes: int


def latest_measurements(database: Database) -> list[BookingMeasurement]:
    """The running instances whose start was measured against its booking."""
    with database.session() as session:
        rows = session.scalars(
            select(Instance).options(selectinload(Instance.deployment)).where(Instance.state == "running")
        )
        found = []
        for row in rows:
            placement = row.placement or {}
            booked, used = placement.get("booked_bytes_per_gpu"), placement.get("used_bytes_per_gpu")
            if not isinstance(booked, int) or not isinstance(used, int):
                continue
            rank = (placement.get("ranks") or [{}])[0]
            found.append(
                BookingMeasurement(
                    deployment=row.deployment.name,
                    replica=row.replica_index,
                    worker=str(rank.get("worker_name") or rank.get("worker_id") or ""),
                    gpu=",".join(str(gpu) for gpu in rank.get("gpu_ids", [])),
                    booked_bytes=booked,
                    used_bytes=used,
                )
            )
        return found
