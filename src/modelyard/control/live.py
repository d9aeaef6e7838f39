"""What the controller holds in memory for each instance while the server runs, in one place.

Every piece of live state of an instance (its engine, its slow task, the launch in flight, the
GPUs it is starting on, whether it takes traffic, its back-off counts, the placement refusal it
waits on, the image made ready for its next start, its deployment as of the last pass) is a field
of one ``InstanceLive``, and ``LiveInstances`` holds one per instance id. Two releases free it:

- ``end_engine``: the engine is gone (stopped, exited, never launched): its GPU booking, its
  place in the rotation and its GPUs' start slot are freed; the counts that outlive one start
  (the back-off's exponent) stay.
- ``release``: the instance is gone (scaled down, its deployment removed, its row deleted): all
  of it, booking included. Each pass releases the instances the store no longer has, so nothing
  of a deleted instance outlives the pass that no longer sees it.

Per deployment, the estimator's memory demands are kept here too (``demand``), and dropped with
the deployment (``forget_deployment``, and each pass for the deployments it no longer sees).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from modelyard.control.instance_store import DeploymentView
from modelyard.control.memory_demand import MemoryDemand
from modelyard.control.scheduler import Scheduler
from modelyard.runtimes.base import EngineHandle, Runtime

logger = logging.getLogger(__name__)

TaskKind = Literal["bring-up", "stop", "verify"]
# A GPU: (worker id, GPU index).
GpuKey = tuple[str, int]


@dataclass
class LiveEngine:
    """An engine the controller holds for one instance."""

    runtime: Runtime
    handle: EngineHandle
    log_path: Path
    base_url: str
    launch_token: str | None = None
    # Runs on this host's CPU cores, with no GPU (it counts when CPU engines share the cores).
    on_cpu: bool = False
    # The key the engine itself asks for (--api-key): sent by readiness, verification and the
    # gateway; in memory only.
    api_key: str | None = field(default=None, repr=False)


@dataclass
class InstanceLive:
    """The live state of one instance; owned by ``LiveInstances``, freed by its releases."""

    instance_id: int
    # Its deployment as of the last pass (None: not seen by a pass yet, e.g. while re-adopting).
    deployment: DeploymentView | None = None
    engine: LiveEngine | None = None
    # At most one slow task (bringing it up, stopping it, verifying it) and its kind.
    task: asyncio.Task[None] | None = None
    task_kind: TaskKind | None = None
    # The launch token of its start in flight: an engine carrying it is not an orphan.
    launching_token: str | None = None
    # GPUs shared by memory it is starting on: vLLM and SGLang size their cache from the memory
    # free while they start, so one start at a time on each.
    starting_on: tuple[GpuKey, ...] = ()
    # In the gateway's rotation (ready, verified, engine alive). Kept here rather than read from
    # a pass's snapshot, which may be older than a bring-up that just finished.
    in_rotation: bool = False
    # Consecutive failed starts (the restart back-off's exponent).
    start_failures: int = 0
    # Consecutive verifications that failed for want of an answer (their back-off's exponent).
    verification_failures: int = 0
    # The scheduler's state and the model's copies when it was refused a placement: placed again
    # only once one changed (a GPU freed, a worker joined, a push ended), not every tick.
    unplaced_marker: str | None = None
    # (start number, Ray node or None) whose image is ready (image_pulls.py).
    image_ready_for: tuple[int, str | None] | None = None


class LiveInstances:
    """One ``InstanceLive`` per instance id, and the deployments' memory demands."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler
        self._instances: dict[int, InstanceLive] = {}
        # (deployment id, its parameters and placement) -> the estimator's demand, computed once.
        self._demands: dict[tuple[int, str], MemoryDemand | None] = {}

    # -- reading ------------------------------------------------------------------------------

    def of(self, instance_id: int) -> InstanceLive:
        """The instance's live state, made empty on first use."""
        live = self._instances.get(instance_id)
        if live is None:
            live = self._instances[instance_id] = InstanceLive(instance_id)
        return live

    def get(self, instance_id: int) -> InstanceLive | None:
        return self._instances.get(instance_id)

    def __iter__(self) -> Iterator[InstanceLive]:
        return iter(list(self._instances.values()))

    def engine(self, instance_id: int) -> LiveEngine | None:
        live = self._instances.get(instance_id)
        return None if live is None else live.engine

    def engines(self) -> dict[int, LiveEngine]:
        return {live.instance_id: live.engine for live in self._instances.values() if live.engine is not None}

    def deployment_of(self, instance_id: int) -> DeploymentView | None:
        live = self._instances.get(instance_id)
        return None if live is None else live.deployment

    def in_rotation(self, instance_id: int) -> bool:
        live = self._instances.get(instance_id)
        return live is not None and live.in_rotation

    def launching_tokens(self) -> set[str]:
        return {live.launching_token for live in self._instances.values() if live.launching_token}

    def starting_on(self, gpu: GpuKey) -> int | None:
        """The instance starting on this GPU (shared by memory), or None."""
        return next((live.instance_id for live in self._instances.values() if gpu in live.starting_on), None)

    def demand(self, key: tuple[int, str]) -> tuple[bool, MemoryDemand | None]:
        """(known, demand) of a deployment's parameters."""
        return key in self._demands, self._demands.get(key)

    def remember_demand(self, key: tuple[int, str], demand: MemoryDemand | None) -> None:
        self._demands[key] = demand

    def forget_demands(self) -> None:
        """Every demand is estimated again (a start's measurement corrected the estimator)."""
        self._demands.clear()

    # -- the pass's view ------------------------------------------------------------------------

    def seen(self, deployments: list[DeploymentView]) -> None:
        """A pass read these deployments: each instance's deployment is recorded, and the
        instances and deployments the store no longer has are released."""
        present: set[int] = set()
        for deployment in deployments:
            for instance in deployment.instances:
                self.of(instance.id).deployment = deployment
                present.add(instance.id)
        for live in self:
            if live.instance_id not in present and live.task is None:
                self.release(live.instance_id)
        kept = {deployment.id for deployment in deployments}
        for key in [key for key in self._demands if key[0] not in kept]:
            del self._demands[key]

    def forget_deployment(self, deployment_id: int) -> None:
        """The deployment is removed: its memory demands are dropped."""
        for key in [key for key in self._demands if key[0] == deployment_id]:
            del self._demands[key]

    # -- releasing ------------------------------------------------------------------------------

    def end_engine(self, instance_id: int) -> None:
        """The instance's engine is gone (reaped): its booking, rotation and GPU slot are freed."""
        live = self._instances.get(instance_id)
        if live is not None:
            live.engine = None
            live.in_rotation = False
            live.starting_on = ()
        self._scheduler.release(instance_id)

    def release(self, instance_id: int) -> None:
        """The instance is gone: everything held for it is freed. An engine still held is left to
        the orphan sweep (``adoption.sweep_orphans``), which stops engines nobody holds."""
        live = self._instances.pop(instance_id, None)
        self._scheduler.release(instance_id)
        if live is not None and live.engine is not None:
            logger.warning(
                "instance %s is gone while its engine %s runs; the orphan sweep stops it",
                instance_id,
                live.engine.handle.label,
            )

    def held(self) -> dict[str, list[int]]:
        """What is held, by kind: instance ids (``demands``: deployment ids). For tests and
        diagnostics: empty once every deployment is removed."""
        return {
            "instances": sorted(self._instances),
            "engines": sorted(self.engines()),
            "tasks": sorted(live.instance_id for live in self._instances.values() if live.task is not None),
            "bookings": self._scheduler.booked_instances(),
            "demands": sorted({deployment_id for deployment_id, _ in self._demands}),
        }
