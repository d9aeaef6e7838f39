"""What the controller's parts share while it runs: the store, the runtimes, the engines it holds,
the slow task of each instance, the scheduler (workers, GPUs, bookings), the clock and its options.

Each instance's live state has one owner (``live.py``: ``LiveInstances``, one ``InstanceLive``
per instance, freed by its releases). The parts (``launch``, ``bring_up``, ``stopping``,
``adoption``, ``reconcile``) are functions of a ``ControlContext``; ``Controller``
(``controller.py``) builds one and runs the loop. Everything runs in one event loop, so nothing
here needs a lock.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import httpx

from modelyard.backends.catalog import BackendCatalog, load_builtin_backends
from modelyard.backends.spec import BackendVersion
from modelyard.control.endpoints import EndpointRegistry
from modelyard.control.instance_store import DeploymentView, InstanceStore
from modelyard.control.live import LiveInstances, TaskKind
from modelyard.control.scheduler import Scheduler
from modelyard.control.transitions import Transition
from modelyard.errors import InvalidInput, ModelyardError
from modelyard.hardware.gpus import GpuInventory
from modelyard.runtimes.selection import RuntimeSet
from modelyard.settings import Settings
from modelyard.store.secret_box import SecretBox

logger = logging.getLogger(__name__)

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


class TaskBoard:
    """At most one slow task per instance (bringing it up, stopping it, verifying it), kept on
    the instance's live state (``live.py``) while it runs."""

    def __init__(self, live: LiveInstances, on_done: Callable[[], None]) -> None:
        self._live = live
        self._on_done = on_done

    def spawn(self, instance_id: int, work: Coroutine[Any, Any, None], kind: TaskKind) -> None:
        task = asyncio.create_task(work, name=f"instance-{instance_id}-{kind}")
        live = self._live.of(instance_id)
        live.task, live.task_kind = task, kind

        def done(finished: asyncio.Task[None]) -> None:
            # Released meanwhile (a stop-and-delete ends with its instance): nothing to clear.
            held = self._live.get(instance_id)
            if held is not None and held.task is finished:
                held.task, held.task_kind = None, None
            if not finished.cancelled() and finished.exception() is not None:
                logger.error("instance %s %s task failed", instance_id, kind, exc_info=finished.exception())
            self._on_done()

        task.add_done_callback(done)

    def kind(self, instance_id: int) -> TaskKind | None:
        live = self._live.get(instance_id)
        return None if live is None else live.task_kind

    def busy(self, instance_id: int) -> bool:
        live = self._live.get(instance_id)
        return live is not None and live.task is not None

    def cancel(self, instance_id: int, kind: TaskKind) -> None:
        live = self._live.get(instance_id)
        if live is not None and live.task is not None and live.task_kind == kind:
            live.task.cancel()
            live.task, live.task_kind = None, None

    async def cancel_all(self) -> None:
        tasks = []
        for live in self._live:
            if live.task is not None:
                tasks.append(live.task)
                live.task.cancel()
                live.task, live.task_kind = None, None
        await asyncio.gather(*tasks, return_exceptions=True)


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
    # Workers, their GPUs and the bookings of the instances that hold engines (scheduler.py).
    scheduler: Scheduler
    # Each instance's live state (engine, task, back-off counts ...) and the memory demands.
    live: LiveInstances
    inventory: GpuInventory = field(default_factory=lambda: GpuInventory(unavailable_reason="not read yet"))
    # The server's environment, which engines inherit: a thread variable set there is kept.
    environment: Mapping[str, str] = field(default_factory=lambda: os.environ)
    catalog: BackendCatalog = field(default_factory=lambda: BackendCatalog(builtin=load_builtin_backends()))

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

    async def transition(self, instance_id: int, change: Transition) -> None:
        """Store one typed transition of the instance (``transitions.py``), in a thread."""
        await asyncio.to_thread(self.store.transition, instance_id, change)
        logger.info("instance %s -> %s: %s", instance_id, change.state, change.reason)
