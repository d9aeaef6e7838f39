"""What the controller's parts share while it runs: the store, the runtimes, the engines it holds,
the slow task of each instance, the scheduler (workers, GPUs, bookings), the clock and its options.

The parts (``launch``, ``bring_up``, ``stopping``, ``adoption``, ``reconcile``) are functions of a
``ControlContext``; ``Controller`` (``controller.py``) builds one and runs the loop. Everything
runs in one event loop, so nothing here needs a lock.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx

from modelyard.backends.catalog import BackendCatalog, load_builtin_backends
from modelyard.backends.spec import BackendVersion
from modelyard.control.endpoints import EndpointRegistry
from modelyard.control.instance_store import DeploymentView, InstanceStore
from modelyard.control.memory_demand import MemoryDemand
from modelyard.control.scheduler import Scheduler
from modelyard.control.states import InstanceState
from modelyard.errors import InvalidInput, ModelyardError
from modelyard.hardware.gpus import GpuInventory
from modelyard.runtimes.base import EngineHandle, Runtime
from modelyard.runtimes.selection import RuntimeSet
from modelyard.settings import Settings
from modelyard.store.secret_box import SecretBox

logger = logging.getLogger(__name__)

TaskKind = Literal["bring-up", "stop", "verify"]
# ``ControllerOptions.stall_seconds`` for ``modelyard serve`` (docs/doctor/log.md#logstalled).
STALL_SECONDS_VARIABLE = "MODELYARD_ENGINE_STALL_SECONDS"


class Clock(Protocol):
    """Time as the controller sees it; tests pass their own."""

    def monotonic(self) -> float: ...

    def now(self) -> datetime: ...


class SystemClock:
    def monotonic(self) -> float:
        return asyncio.get_running_loop().time()

    def now(self) -> datetime:
        return datetime.now(UTC)


@dataclass(frozen=True)
class ControllerOptions:
    tick_seconds: float = 1.0
    backoff_initial_seconds: float = 1.0
    backoff_max_seconds: float = 60.0
    startup_timeout_seconds: float = 1800.0
    # A starting engine whose log has no new line for this long is reported (not stopped).
    stall_seconds: float = 600.0
    gpu_refresh_seconds: float = 5.0
    # How often the runtimes are asked for engines nobody claims (a start killed half-way).
    orphan_sweep_seconds: float = 60.0
    # How long an orphan gets between SIGTERM and SIGKILL.
    orphan_grace_seconds: float = 10.0
    # The address engines listen on; the gateway reaches them where the runtime says.
    worker_ip: str = "127.0.0.1"
    # Each verification request may wait this many times what its tokens took in verify.speed,
    # within [floor, ceiling] seconds (doctor.verify.VerificationBudget).
    verification_factor: float = 4.0
    verification_floor_seconds: float = 30.0
    verification_ceiling_seconds: float = 600.0
    # A verification that failed for want of an answer (time limit, refused connection, 503) is
    # run again after this delay, doubled each time up to the maximum, until it passes.
    verification_retry_initial_seconds: float = 10.0
    verification_retry_max_seconds: float = 300.0
    # The cores CPU engines share (their thread variables, cpu_threads.py); None: this process's
    # usable cores.
    cpu_cores: int | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> ControllerOptions:
        """The defaults, with ``MODELYARD_ENGINE_STALL_SECONDS`` (a positive number of seconds)
        setting ``stall_seconds``: how long a starting engine's log may stay silent before the
        instance says so, with the stage it stopped in."""
        text = (environ.get(STALL_SECONDS_VARIABLE) or "").strip()
        if not text:
            return cls()
        try:
            stall_seconds = float(text)
        except ValueError:
            stall_seconds = 0.0
        if not stall_seconds > 0:
            raise InvalidInput(
                f"{STALL_SECONDS_VARIABLE}={text!r} is not a positive number of seconds",
                hint=f"set it to e.g. 300, or unset it for the default ({cls.stall_seconds:g})",
            )
        return cls(stall_seconds=stall_seconds)


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


class TaskBoard:
    """At most one slow task per instance (bringing it up, stopping it, verifying it)."""

    def __init__(self, on_done: Callable[[], None]) -> None:
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._kinds: dict[int, TaskKind] = {}
        self._on_done = on_done

    def spawn(self, instance_id: int, work: Coroutine[Any, Any, None], kind: TaskKind) -> None:
        task = asyncio.create_task(work, name=f"instance-{instance_id}-{kind}")
        self._tasks[instance_id] = task
        self._kinds[instance_id] = kind

        def done(finished: asyncio.Task[None]) -> None:
            if self._tasks.get(instance_id) is finished:
                del self._tasks[instance_id]
                del self._kinds[instance_id]
            if not finished.cancelled() and finished.exception() is not None:
                logger.error("instance %s %s task failed", instance_id, kind, exc_info=finished.exception())
            self._on_done()

        task.add_done_callback(done)

    def kind(self, instance_id: int) -> TaskKind | None:
        return self._kinds.get(instance_id)

    def busy(self, instance_id: int) -> bool:
        return instance_id in self._tasks

    def cancel(self, instance_id: int, kind: TaskKind) -> None:
        if self._kinds.get(instance_id) == kind:
            self._tasks.pop(instance_id).cancel()
            del self._kinds[instance_id]

    async def cancel_all(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._kinds.clear()


@dataclass
class ControlContext:
    settings: Settings
    store: InstanceStore
    endpoints: EndpointRegistry
    runtimes: RuntimeSet
    options: ControllerOptions
    clock: Clock
    owner: str
    client: httpx.AsyncClient
    tasks: TaskBoard
    poke: Callable[[], None]
    # Opens the sealed secrets of deployments (env values, --api-key ...) only to launch engines.
    secrets: SecretBox
    engines: dict[int, LiveEngine] = field(default_factory=dict)
    # Workers, their GPUs and the bookings of the instances that hold engines (scheduler.py).
    scheduler: Scheduler = field(default_factory=Scheduler)
    # Instances refused a placement, with the scheduler's epoch and the model's copies on the
    # workers then: placed again only once one changed (a GPU freed, a worker joined, a push
    # ended), not every tick.
    unplaced: dict[int, str] = field(default_factory=dict)
    # Memory demands per deployment (id, updated parameters) from the estimator, computed once.
    demands: dict[tuple[int, str], MemoryDemand | None] = field(default_factory=dict)
    # Consecutive failed starts per instance (the back-off's exponent).
    failures: dict[int, int] = field(default_factory=dict)
    # Consecutive verifications per instance that failed for want of an answer (their back-off).
    verification_failures: dict[int, int] = field(default_factory=dict)
    inventory: GpuInventory = field(default_factory=lambda: GpuInventory(unavailable_reason="not read yet"))
    # The server's environment, which engines inherit: a thread variable set there is kept.
    environment: Mapping[str, str] = field(default_factory=lambda: os.environ)
    catalog: BackendCatalog = field(default_factory=lambda: BackendCatalog(builtin=load_builtin_backends()))
    deployment_of: dict[int, DeploymentView] = field(default_factory=dict)
    # Launch tokens of starts in flight: an engine carrying one is not an orphan.
    launching: set[str] = field(default_factory=set)
    # GPUs shared by memory with an engine starting on them: (worker id, GPU index) -> instance id.
    # vLLM and SGLang size their cache from the memory free while they start, so one at a time.
    starting_on_gpu: dict[tuple[str, int], int] = field(default_factory=dict)
    # Instances in the gateway's rotation (ready, verified, engine alive). Kept here rather than
    # read from a pass's snapshot, which may be older than a bring-up that just finished.
    in_rotation: set[int] = field(default_factory=set)
    # Instance id -> (start number, Ray node or None) whose image is ready (image_pulls.py).
    images_ready: dict[int, tuple[int, str | None]] = field(default_factory=dict)

    def version_or_none(self, deployment: DeploymentView) -> BackendVersion | None:
        try:
            return self.catalog.resolve_version(deployment.backend, deployment.backend_version)
        except ModelyardError:
            return None

    def engine_family(self, deployment: DeploymentView | None) -> str | None:
        if deployment is None:
            return None
        try:
            return self.catalog.get(deployment.backend).family
        except ModelyardError:
            return None

    def served_name(self, deployment: DeploymentView) -> str:
        version = self.version_or_none(deployment)
        if version is not None and version.served_model_name == "model_path":
            return self.runtimes.engine_view(version).engine_model_path(deployment.model_path)
        return deployment.name

    async def transition(self, instance_id: int, state: InstanceState, reason: str, **fields: Any) -> None:
        await asyncio.to_thread(self.store.transition, instance_id, state, reason, **fields)
        logger.info("instance %s -> %s: %s", instance_id, state, reason)
