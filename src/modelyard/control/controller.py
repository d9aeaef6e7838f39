"""The controller: makes the running engines match the deployments the user asked for.

One asyncio task runs ``reconcile`` every ``tick_seconds``, or at once when ``poke`` is called
after the API changed desired state. Each reconcile reads a snapshot of deployments and
instances, then for each instance takes at most one step: place and start it, notice that its
engine exited (record why, schedule a restart with exponential back-off), or stop it. Slow work
(waiting for readiness, stopping with a grace period) runs in one task per instance, so the
loop itself never waits on an engine.

At start the controller re-adopts the engines a previous server process left running (matched
by pid and process start time); the ones that are gone are restarted at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import httpx

from modelyard.backends.catalog import BackendCatalog, load_builtin_backends
from modelyard.backends.render import render_launch
from modelyard.backends.spec import BackendSpec, BackendVersion
from modelyard.control.endpoints import Endpoint, EndpointRegistry
from modelyard.control.instance_store import DeploymentView, InstanceStore, InstanceView
from modelyard.control.readiness import ReadinessTarget, tiny_chat, wait_for_health
from modelyard.control.scheduler import place
from modelyard.control.states import InstanceState
from modelyard.control.verification import diagnose_engine_log, run_verification
from modelyard.errors import ModelyardError
from modelyard.hardware.gpus import GpuInventory, read_gpu_inventory
from modelyard.runtimes.base import EngineProcess, ExitStatus, LaunchSpec, Runtime, SignalTarget
from modelyard.safe_paths import path_inside
from modelyard.secret_names import mask_arguments
from modelyard.settings import Settings
from modelyard.store.database import Database
from modelyard.store.secret_box import SecretBox
from modelyard.store.tables import utc_now

logger = logging.getLogger(__name__)

TaskKind = Literal["bring-up", "stop"]

LIVE_STATES = frozenset({InstanceState.STARTING, InstanceState.RUNNING, InstanceState.STOPPING})


@dataclass(frozen=True)
class ControllerOptions:
    tick_seconds: float = 1.0
    backoff_initial_seconds: float = 1.0
    backoff_max_seconds: float = 60.0
    startup_timeout_seconds: float = 1800.0
    gpu_refresh_seconds: float = 5.0
    # The address engines listen on; the gateway reaches them there.
    worker_ip: str = "127.0.0.1"


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


class Controller:
    def __init__(
        self,
        *,
        settings: Settings,
        database: Database,
        endpoints: EndpointRegistry,
        runtime: Runtime,
        options: ControllerOptions | None = None,
    ) -> None:
        self._settings = settings
        # Opens the sealed secrets of deployments (env values, --api-key ...) to launch engines.
        self._secrets = SecretBox.for_data_dir(settings.data_dir)
        self._store = InstanceStore(database)
        self._endpoints = endpoints
        self._runtime = runtime
        self._options = options or ControllerOptions()
        self._processes: dict[int, EngineProcess] = {}
        # At most one piece of slow work per instance: bringing it up, or stopping it.
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._task_kind: dict[int, TaskKind] = {}
        self._failures: dict[int, int] = {}
        self._wakeup = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._inventory = GpuInventory(unavailable_reason="not read yet")
        self._inventory_read_at = 0.0
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(30.0), trust_env=False)
        # GPU index -> (instance label, instance id), for the instances that have a process.
        self._gpu_booking: dict[int, tuple[str, int]] = {}
        # The last snapshot's backend catalog and deployments by instance id.
        self._catalog_snapshot = BackendCatalog(builtin=load_builtin_backends(), custom=[])
        self._deployment_of: dict[int, DeploymentView] = {}

    # -- the API's view -------------------------------------------------------------------

    def poke(self) -> None:
        self._wakeup.set()

    def gpu_inventory(self) -> GpuInventory:
        return self._inventory

    # -- life cycle -----------------------------------------------------------------------

    async def start(self) -> None:
        self._inventory = await asyncio.to_thread(read_gpu_inventory)
        self._inventory_read_at = asyncio.get_running_loop().time()
        self._catalog_snapshot = await asyncio.to_thread(self._catalog)
        await self._adopt_survivors()
        self._loop_task = asyncio.create_task(self._run(), name="modelyard-controller")

    async def shutdown(self, *, stop_engines: bool = True) -> None:
        """Stop the loop; with ``stop_engines``, stop every engine (they start again with the server)."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()
        self._task_kind.clear()
        if stop_engines:
            await asyncio.gather(
                *(
                    self._stop_instance(instance_id, "the server shut down")
                    for instance_id in list(self._processes)
                )
            )
        await self._client.aclose()

    async def _run(self) -> None:
        while True:
            try:
                await self.reconcile()
            except Exception:
                logger.exception("reconcile failed; trying again at the next tick")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout=self._options.tick_seconds)
            self._wakeup.clear()

    async def _adopt_survivors(self) -> None:
        deployments = await asyncio.to_thread(self._store.load_deployments)
        for deployment in deployments:
            for instance in deployment.instances:
                await self._adopt_one(deployment, instance)

    async def _adopt_one(self, deployment: DeploymentView, instance: InstanceView) -> None:
        if instance.pid is None or instance.process_start_time is None:
            if instance.state in LIVE_STATES:
                await self._transition(instance.id, InstanceState.PENDING, "no engine process recorded")
            return
        log_path = Path(instance.log_path) if instance.log_path else Path("/dev/null")
        process = self._runtime.adopt(instance.pid, instance.process_start_time, log_path)
        if process is None:
            if instance.state in LIVE_STATES:
                await self._transition(
                    instance.id,
                    InstanceState.ERROR,
                    "the engine process was gone when the server started; restarting it",
                    pid=None,
                    next_start_at=utc_now(),
                )
            return
        self._processes[instance.id] = process
        label = f"{deployment.name}/replica-{instance.replica_index}"
        self._gpu_booking.update({gpu: (label, instance.id) for gpu in instance.gpu_ids})
        if deployment.desired_state != "running" or instance.replica_index >= deployment.replicas:
            return  # the reconcile loop stops it
        await self._transition(
            instance.id, InstanceState.STARTING, f"re-adopted engine pid {process.pid}; checking readiness"
        )
        self._spawn(instance.id, self._bring_up(deployment, instance.id, process, instance.port or 0))

    # -- reconcile ------------------------------------------------------------------------

    async def reconcile(self) -> None:
        await self._refresh_inventory()
        deployments = await asyncio.to_thread(self._store.load_deployments)
        self._catalog_snapshot = await asyncio.to_thread(self._catalog)
        self._deployment_of = {
            instance.id: deployment for deployment in deployments for instance in deployment.instances
        }
        for deployment in deployments:
            if deployment.desired_state == "running":
                await self._reconcile_running(deployment)
            else:
                await self._reconcile_stopped(deployment)
            self._publish(deployment)

    async def _refresh_inventory(self) -> None:
        now = asyncio.get_running_loop().time()
        if now - self._inventory_read_at >= self._options.gpu_refresh_seconds:
            self._inventory = await asyncio.to_thread(read_gpu_inventory)
            self._inventory_read_at = now

    async def _reconcile_running(self, deployment: DeploymentView) -> None:
        present = {instance.replica_index for instance in deployment.instances}
        missing = [index for index in range(deployment.replicas) if index not in present]
        if missing:
            await asyncio.to_thread(self._store.create_instances, deployment.id, missing)
            self.poke()
        for instance in deployment.instances:
            if await self._noticed_exit(instance):
                continue
            if instance.replica_index >= deployment.replicas:
                if self._task_kind.get(instance.id) != "stop":
                    self._cancel_bring_up(instance.id)
                    self._spawn(instance.id, self._stop_and_delete(instance.id, "scaled down"), kind="stop")
                continue
            if instance.id in self._tasks:
                continue
            await self._step(deployment, instance)

    async def _reconcile_stopped(self, deployment: DeploymentView) -> None:
        deleting = deployment.desired_state == "deleted"
        reason = "deployment removed" if deleting else "deployment stopped"
        for instance in deployment.instances:
            if self._task_kind.get(instance.id) == "stop":
                continue
            self._cancel_bring_up(instance.id)
            if instance.id in self._processes:
                self._spawn(instance.id, self._stop_instance(instance.id, reason), kind="stop")
            elif instance.state != InstanceState.STOPPED:
                await self._transition(instance.id, InstanceState.STOPPED, reason, pid=None)
        busy = any(
            instance.id in self._tasks or instance.id in self._processes for instance in deployment.instances
        )
        if deleting and not busy:
            await asyncio.to_thread(self._store.delete_deployment, deployment.id)
            self._endpoints.forget(deployment.name)
            logger.info("deployment %s removed", deployment.name)

    async def _noticed_exit(self, instance: InstanceView) -> bool:
        """If the instance's engine has exited (also while it was starting), handle it; True then."""
        process = self._processes.get(instance.id)
        if process is None or self._task_kind.get(instance.id) == "stop":
            return False
        status = self._runtime.exit_status(process)
        if status is None:
            return False
        await self._on_engine_exit(instance, process, status)
        return True

    def _cancel_bring_up(self, instance_id: int) -> None:
        if self._task_kind.get(instance_id) == "bring-up":
            self._tasks[instance_id].cancel()
            del self._tasks[instance_id]
            del self._task_kind[instance_id]

    async def _step(self, deployment: DeploymentView, instance: InstanceView) -> None:
        if instance.id in self._processes:
            return
        if instance.state == InstanceState.ERROR and instance.next_start_at is None:
            return  # failed for a reason a restart cannot fix; waits for the user
        due = instance.next_start_at is None or instance.next_start_at <= utc_now()
        if due:
            await self._start_instance(deployment, instance)

    # -- starting -------------------------------------------------------------------------

    def _catalog(self) -> BackendCatalog:
        custom = [BackendSpec.model_validate(spec) for spec in self._store.load_custom_backends()]
        return BackendCatalog(builtin=load_builtin_backends(), custom=custom)

    async def _start_instance(self, deployment: DeploymentView, instance: InstanceView) -> None:
        label = f"{deployment.name}/replica-{instance.replica_index}"
        try:
            version = self._catalog_snapshot.resolve_version(deployment.backend, deployment.backend_version)
            gpu_ids = place(
                gpus_per_replica=deployment.gpus_per_replica,
                gpu_ids=deployment.gpu_ids,
                inventory=self._inventory,
                bookings=self._current_bookings(excluding=instance.id),
            )
            port = free_port(self._options.worker_ip)
            launch = render_launch(
                version,
                model_path=deployment.model_path,
                port=port,
                worker_ip=self._options.worker_ip,
                model_name=deployment.name,
                gpu_ids=gpu_ids,
                backend_parameters=self._secrets.reveal_arguments(deployment.backend_parameters),
                env=self._secrets.reveal_env(deployment.env),
            )
            start_number = instance.start_count + 1
            log_path = path_inside(
                self._settings.logs_dir,
                deployment.name,
                f"replica-{instance.replica_index}",
                f"start-{start_number}.log",
            )
        except ModelyardError as error:
            if instance.state != InstanceState.PENDING or instance.reason != str(error):
                await self._transition(instance.id, InstanceState.PENDING, str(error))
            return
        try:
            process = await asyncio.to_thread(
                self._runtime.start, LaunchSpec(argv=launch.argv, env=launch.env, log_path=log_path)
            )
        except ModelyardError as error:
            await self._fail(
                instance,
                f"could not start the engine: {error}",
                start_count=start_number,
                log_path=str(log_path),
            )
            return
        self._processes[instance.id] = process
        self._gpu_booking.update({gpu: (label, instance.id) for gpu in gpu_ids})
        await self._transition(
            instance.id,
            InstanceState.STARTING,
            f"engine pid {process.pid} starting on port {port}"
            + (f", GPUs {','.join(map(str, gpu_ids))}" if gpu_ids else ", CPU"),
            pid=process.pid,
            process_start_time=process.start_time,
            port=port,
            gpu_ids=gpu_ids,
            command=mask_arguments(launch.argv),
            log_path=str(log_path),
            start_count=start_number,
            started_at=utc_now(),
            ready_at=None,
            next_start_at=None,
            diagnosis=None,
            verification=[],
        )
        self._spawn(instance.id, self._bring_up(deployment, instance.id, process, port, version))

    def _current_bookings(self, *, excluding: int) -> dict[int, str]:
        return {
            gpu: label
            for gpu, (label, owner) in self._gpu_booking.items()
            if owner != excluding and owner in self._processes
        }

    async def _bring_up(
        self,
        deployment: DeploymentView,
        instance_id: int,
        process: EngineProcess,
        port: int,
        version: BackendVersion | None = None,
    ) -> None:
        if version is None:
            version = self._catalog_snapshot.resolve_version(deployment.backend, deployment.backend_version)
        served = deployment.model_path if version.served_model_name == "model_path" else deployment.name
        target = ReadinessTarget(
            base_url=f"http://{self._options.worker_ip}:{port}",
            health_path=version.health_path,
            served_model_name=served,
        )
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            await asyncio.wait_for(
                wait_for_health(self._client, target), timeout=self._options.startup_timeout_seconds
            )
        except TimeoutError:
            await self._fail_running_engine(
                instance_id, f"not healthy after {self._options.startup_timeout_seconds:.0f} s"
            )
            return
        problem = await tiny_chat(self._client, target)
        if problem is not None:
            await self._fail_running_engine(instance_id, problem)
            return
        results: list[dict[str, Any]] = []
        if not deployment.skip_verification:
            results = await run_verification(
                client=self._client,
                base_url=target.base_url,
                served_model_name=served,
                deployment_name=deployment.name,
                version=version,
                model_details=deployment.model_details,
            )
        failed = [result for result in results if result.get("status") == "failed"]
        if failed:
            summary = "; ".join(f"{result['check_id']}: {result.get('message', '')}" for result in failed)
            await self._transition(
                instance_id,
                InstanceState.ERROR,
                f"verification failed, kept out of rotation: {summary}",
                verification=results,
                next_start_at=None,
            )
            return
        elapsed = loop.time() - started
        self._failures.pop(instance_id, None)
        # Into rotation before the store says running: published only by the next reconcile, a
        # request in between was told "no ready replica (1 running)" (seen during a restart).
        if self._endpoints.is_known(deployment.name):
            others = [
                e for e in self._endpoints.endpoints_for(deployment.name) if e.instance_id != instance_id
            ]
            self._endpoints.publish(deployment.name, [*others, self._endpoint(deployment, instance_id, port)])
        await self._transition(
            instance_id,
            InstanceState.RUNNING,
            f"ready in {elapsed:.1f} s (health {version.health_path} answered, chat request succeeded)",
            ready_at=utc_now(),
            verification=results,
        )
        self.poke()

    async def _fail_running_engine(self, instance_id: int, reason: str) -> None:
        """Readiness failed while the process lives: stop it, then restart after back-off."""
        await self._stop_instance(instance_id, reason, final_state=InstanceState.ERROR)
        await self._schedule_restart(instance_id, reason)

    # -- failures -------------------------------------------------------------------------

    async def _on_engine_exit(
        self, instance: InstanceView, process: EngineProcess, status: ExitStatus
    ) -> None:
        self._processes.pop(instance.id, None)
        self._release_gpus(instance.id)
        self._cancel_bring_up(instance.id)
        # The launcher is gone; make sure nothing of its group lingers (it could hold the GPU).
        await self._runtime.stop(process, signal_target="group", grace_seconds=5.0)
        starting = instance.state == InstanceState.STARTING
        phase = "while starting" if starting else "while running"
        deployment = self._deployment_of.get(instance.id)
        exit_code = status.exit_code if status.signal_number is None else -status.signal_number
        diagnosis = await asyncio.to_thread(
            functools.partial(
                diagnose_engine_log,
                process.log_path,
                # A SIGKILL while loading points at the OOM killer; while serving it may be anyone.
                exit_code=exit_code if starting else None,
                engine=self._engine_family(deployment),
                engine_args=deployment.backend_parameters if deployment else (),
            )
        )
        reason = f"engine {status.describe()} {phase}"
        if diagnosis:
            reason += f": {diagnosis}"
        await self._fail(instance, reason, diagnosis=diagnosis)
        self.poke()

    async def _fail(self, instance: InstanceView, reason: str, **fields: Any) -> None:
        failures = self._failures.get(instance.id, 0) + 1
        self._failures[instance.id] = failures
        delay = min(
            self._options.backoff_initial_seconds * 2 ** (failures - 1), self._options.backoff_max_seconds
        )
        await self._transition(
            instance.id,
            InstanceState.ERROR,
            f"{reason}; restart {failures} in {delay:.0f} s",
            pid=None,
            restart_count=instance.restart_count + 1,
            next_start_at=utc_now() + timedelta(seconds=delay),
            **fields,
        )

    async def _schedule_restart(self, instance_id: int, reason: str) -> None:
        # The last snapshot's view is current enough (a bring-up does not change restart_count);
        # an engine re-adopted before the first reconcile is not in it yet.
        deployments = list(self._deployment_of.values())
        if instance_id not in self._deployment_of:
            deployments = await asyncio.to_thread(self._store.load_deployments)
        for deployment in deployments:
            for instance in deployment.instances:
                if instance.id == instance_id:
                    await self._fail(instance, reason)
                    return

    # -- stopping -------------------------------------------------------------------------

    async def _stop_instance(
        self, instance_id: int, reason: str, *, final_state: InstanceState = InstanceState.STOPPED
    ) -> None:
        process = self._processes.get(instance_id)
        if process is None:
            await self._transition(instance_id, final_state, reason, pid=None)
            return
        await self._transition(instance_id, InstanceState.STOPPING, reason)
        signal_target, grace = self._stop_policy(instance_id)
        await self._runtime.stop(process, signal_target=signal_target, grace_seconds=grace)
        self._processes.pop(instance_id, None)
        self._release_gpus(instance_id)
        await self._transition(instance_id, final_state, reason, pid=None)

    def _stop_policy(self, instance_id: int) -> tuple[SignalTarget, float]:
        deployment = self._deployment_of.get(instance_id)
        version = self._version_or_none(deployment) if deployment is not None else None
        if version is None:
            return "group", 30.0
        return version.stop_signal_target, version.stop_grace_seconds

    async def _stop_and_delete(self, instance_id: int, reason: str) -> None:
        await self._stop_instance(instance_id, reason)
        await asyncio.to_thread(self._store.delete_instance, instance_id)

    # -- helpers --------------------------------------------------------------------------

    def _spawn(self, instance_id: int, work: Any, *, kind: TaskKind = "bring-up") -> None:
        task = asyncio.create_task(work, name=f"instance-{instance_id}-{kind}")
        self._tasks[instance_id] = task
        self._task_kind[instance_id] = kind

        def _done(finished: asyncio.Task[None]) -> None:
            if self._tasks.get(instance_id) is finished:
                del self._tasks[instance_id]
                del self._task_kind[instance_id]
            if not finished.cancelled() and finished.exception() is not None:
                logger.error("instance %s task failed", instance_id, exc_info=finished.exception())
            self.poke()

        task.add_done_callback(_done)

    async def _transition(self, instance_id: int, state: InstanceState, reason: str, **fields: Any) -> None:
        await asyncio.to_thread(self._store.transition, instance_id, state, reason, **fields)
        logger.info("instance %s -> %s: %s", instance_id, state, reason)

    def _publish(self, deployment: DeploymentView) -> None:
        if deployment.desired_state == "deleted":
            return
        endpoints = []
        for instance in deployment.instances:
            if instance.state != InstanceState.RUNNING or instance.port is None:
                continue
            if instance.id not in self._processes or instance.id in self._tasks:
                continue
            endpoints.append(self._endpoint(deployment, instance.id, instance.port))
        self._endpoints.publish(deployment.name, endpoints)

    def _endpoint(self, deployment: DeploymentView, instance_id: int, port: int) -> Endpoint:
        return Endpoint(
            deployment_name=deployment.name,
            instance_id=instance_id,
            base_url=f"http://{self._options.worker_ip}:{port}",
            served_model_name=self._served_name(deployment),
            reasoning_field=self._reasoning_field(deployment),
            engine=self._engine_family(deployment) or "custom",
            engine_version=deployment.backend_version,
        )

    def _served_name(self, deployment: DeploymentView) -> str:
        version = self._version_or_none(deployment)
        if version is not None and version.served_model_name == "model_path":
            return deployment.model_path
        return deployment.name

    def _reasoning_field(self, deployment: DeploymentView) -> str:
        version = self._version_or_none(deployment)
        return version.reasoning_field if version is not None else "reasoning_content"

    def _engine_family(self, deployment: DeploymentView | None) -> str | None:
        if deployment is None:
            return None
        try:
            return self._catalog_snapshot.get(deployment.backend).family
        except ModelyardError:
            return None

    def _release_gpus(self, instance_id: int) -> None:
        for gpu in [gpu for gpu, (_, owner) in self._gpu_booking.items() if owner == instance_id]:
            del self._gpu_booking[gpu]

    def _version_or_none(self, deployment: DeploymentView) -> BackendVersion | None:
        try:
            return self._catalog_snapshot.resolve_version(deployment.backend, deployment.backend_version)
        except ModelyardError:
            return None
