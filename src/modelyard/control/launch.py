"""Starting one instance: gather what the start depends on, plan it, record the intent, launch.

``start_instance`` gathers the inputs (the backend version, the placement, the image made ready,
the addresses the runtime allocates) and hands them to ``start_plan.plan_start``, which decides
the start and stores nothing; ``execute_start`` carries the plan out.

Intent before action: the instance's launch token (and the runtime, address, log file and GPUs)
is committed to the store before the runtime is asked to start anything, and the engine carries
that token (an env marker, a container label). A server killed at any moment afterwards finds
the engine by its token when it starts again (``adoption.py``), so no engine is ever orphaned.

A launch that cannot happen is this instance's state, with the reason: ``pending`` when it waits
for GPUs or a backend version, ``error`` with a back-off when the engine cannot be launched
("cannot launch: argument list too long ..."). It never stops the reconcile loop.
"""

from __future__ import annotations

import asyncio
import logging

from modelyard.backends.spec import BackendVersion
from modelyard.control.bring_up import bring_up
from modelyard.control.context import ControlContext
from modelyard.control.cpu_threads import usable_cores
from modelyard.control.failures import fail_start
from modelyard.control.image_pulls import image_ready
from modelyard.control.instance_store import DeploymentView, InstanceView
from modelyard.control.live import LiveEngine
from modelyard.control.memory_demand import KNOB_FLAGS
from modelyard.control.placement import Decision, decide, demand_of
from modelyard.control.start_observations import load_observations
from modelyard.control.start_plan import StartInputs, StartPlan, gpu_keys, masked_command, plan_start
from modelyard.control.states import InstanceState
from modelyard.control.transitions import EngineLaunched, Waiting
from modelyard.errors import ModelyardError, Unschedulable
from modelyard.runtimes.base import Runtime
from modelyard.runtimes.ray_connection import local_node_id
from modelyard.store.tables import new_uid

logger = logging.getLogger(__name__)

# The reason of a replica the scheduler refused, before the scheduler's own words (the autoscaler
# reports such replicas; "waiting for placement" alone is a new instance not tried yet).
PLACEMENT_REFUSED_PREFIX = "waiting for placement: "


def instance_label(deployment: DeploymentView, instance: InstanceView) -> str:
    return f"{deployment.name}/replica-{instance.replica_index}"


async def _wait(context: ControlContext, instance: InstanceView, reason: str) -> None:
    if instance.state != InstanceState.PENDING or instance.reason != reason:
        await context.transition(instance.id, Waiting(reason=reason))


async def _decide(
    context: ControlContext, deployment: DeploymentView, version: BackendVersion, parameters: list[str]
) -> Decision:
    """Place the replica: its memory demand (the estimator, in a thread, once per deployment
    version of its parameters), then the scheduler's decision (on the loop: microseconds)."""
    key = (deployment.id, "\0".join(deployment.backend_parameters) + f"|{deployment.placement}")
    known, demand = context.live.demand(key)
    if not known:
        engine = context.engine_family(deployment)
        now = context.clock.now()
        observations = (
            await asyncio.to_thread(
                load_observations,
                context.store.database,
                engine=engine,
                engine_version=version.version,
                now=now,
            )
            if engine in KNOB_FLAGS and deployment.placement.get("gpu_memory")
            else []
        )
        demand = await asyncio.to_thread(
            demand_of,
            context.scheduler.workers,
            deployment,
            engine=engine,
            engine_version=version.version,
            parameters=parameters,
            env=deployment.env,
            observations=observations,
            now=now,
            reserve_bytes=context.settings.placement_headroom_bytes,
        )
        context.live.remember_demand(key, demand)
    # An image backend goes to a worker whose Docker can run it (as its join recorded).
    server_worker = local_node_id() if context.runtimes.ray is not None else None
    return decide(
        context.scheduler,
        deployment,
        demand,
        in_container=version.runs_in_container,
        server_worker=server_worker,
    )


def _runtime_for(context: ControlContext, version: BackendVersion) -> Runtime:
    """The runtime that runs ``version``: the one rule, ``RuntimeSet.for_version`` (on a cluster
    Ray, on the chosen worker; on a single host a process or a container here)."""
    return context.runtimes.for_version(version)


async def start_instance(context: ControlContext, deployment: DeploymentView, instance: InstanceView) -> None:
    """Start the instance if it can start now: gather the inputs (version, placement, image,
    addresses), ``plan_start`` them, then ``execute_start`` the plan. Otherwise it waits
    (``pending`` with the reason) or fails (``error`` with a back-off)."""
    try:
        version = context.catalog.resolve_version(deployment.backend, deployment.backend_version)
    except ModelyardError as error:
        await _wait(context, instance, f"waiting for the backend: {error}")
        return
    # What a refusal depends on: the scheduler's state, and where the model's files are.
    marker = f"{context.scheduler.epoch}|{sorted((deployment.model_copies or {}).items())}"
    live = context.live.of(instance.id)
    if live.unplaced_marker == marker:
        return  # refused in this state: nothing has changed that could let it fit
    parameters = context.secrets.reveal_arguments(deployment.backend_parameters)
    env = context.secrets.reveal_env(deployment.env)
    try:
        decision = await _decide(context, deployment, version, parameters)
    except Unschedulable as error:
        live.unplaced_marker = marker
        await _wait(context, instance, f"{PLACEMENT_REFUSED_PREFIX}{error}")
        return
    live.unplaced_marker = None
    if (busy := shared_gpu_starting(context, decision, instance.id)) is not None:
        await _wait(
            context,
            instance,
            f"waiting for {busy}: another engine sharing it is still starting (engines size their "
            "cache from the memory free while they start, so they start there one at a time)",
        )
        return
    runtime = _runtime_for(context, version)
    # What the engine sees of the model (a container: /models/<folder>, read-only), on any host.
    seen = context.runtimes.engine_view(version)
    ranks = decision.placement.ranks
    rank0_node = ranks[0].worker_id if runtime.kind == "ray" and ranks else None
    if not image_ready(context, deployment, instance, version, runtime, node_id=rank0_node):
        return  # its pull step runs first (the `pulling` stage, on the chosen worker), then it goes on
    try:
        address = await runtime.allocate_address(context.options.worker_ip, node_id=rank0_node)
        master = (
            await runtime.allocate_address(context.options.worker_ip, node_id=rank0_node)
            if len(ranks) > 1
            else None
        )
        engines = context.live.engines()
        plan = plan_start(
            StartInputs(
                deployment=deployment,
                instance=instance,
                version=version,
                decision=decision,
                runtime_kind=runtime.kind,
                engine_model_path=seen.engine_model_path(deployment.model_path),
                mounts=[mount.to_json() for mount in seen.mounts(deployment.model_path)],
                address=address,
                master_address=master,
                parameters=parameters,
                env=env,
                owner=context.owner,
                launch_token=new_uid(),
                instances_dir=context.settings.instances_dir,
                server_environment=context.environment,
                usable_cores=context.options.cpu_cores or usable_cores(),
                other_cpu_engines=sum(
                    1 for held_id, held in engines.items() if held.on_cpu and held_id != instance.id
                ),
            )
        )
    except (ModelyardError, OSError) as error:
        await fail_start(context, instance, f"cannot launch: {error}")
        return
    await execute_start(context, deployment, instance, version, runtime, plan)


async def execute_start(
    context: ControlContext,
    deployment: DeploymentView,
    instance: InstanceView,
    version: BackendVersion,
    runtime: Runtime,
    plan: StartPlan,
) -> None:
    """Carry ``plan`` out: record the intent (``Launching``), book its GPUs, ask the runtime, record
    the engine (``EngineLaunched``), then bring it up in the instance's task. A runtime that
    refuses frees what was booked and fails the start."""
    live = context.live.of(instance.id)
    spec = plan.spec
    await context.transition(instance.id, plan.launching(started_at=context.clock.now()))
    context.scheduler.book(instance.id, instance_label(deployment, instance), plan.placement)
    live.image_ready_for = None  # that image was for this start: the next one checks again
    live.launching_token = spec.identity.launch_token
    live.starting_on = plan.starting_on
    try:
        started = await runtime.start(spec)
    except ModelyardError as error:
        context.live.end_engine(instance.id)
        await fail_start(context, instance, f"cannot launch: {error}")
        return
    finally:
        live.launching_token = None
    engine = LiveEngine(
        runtime=runtime,
        handle=started.handle,
        log_path=spec.log_path,
        base_url=spec.address.base_url,
        launch_token=spec.identity.launch_token,
        on_cpu=plan.on_cpu,
        api_key=plan.api_key,
    )
    live.engine = engine
    pid, start_time = runtime.host_process(started.handle) or (None, None)
    launched = EngineLaunched(
        reason=f"engine {started.handle.label} starting at {spec.address.base_url} ({plan.where})",
        handle=started.handle.to_json(),
        pid=pid,
        process_start_time=start_time,
        command=masked_command(started.command, plan.secrets),
    )
    await context.transition(instance.id, launched)
    context.tasks.spawn(
        instance.id, _bring_up_then_free_gpus(context, deployment, instance.id, engine, version), "bring-up"
    )


async def _bring_up_then_free_gpus(
    context: ControlContext,
    deployment: DeploymentView,
    instance_id: int,
    engine: LiveEngine,
    version: BackendVersion,
) -> None:
    try:
        await bring_up(context, deployment, instance_id, engine, version, verified=False)
    finally:  # running, failed or stopped: its GPUs' memory is settled either way
        release_shared_gpus(context, instance_id)


def shared_gpu_starting(context: ControlContext, decision: Decision, instance_id: int) -> str | None:
    """A GPU of ``decision`` shared by memory on which another engine is starting ("GPU 0 of
    node-a"), or None: engines placed by memory start one at a time on each GPU."""
    if decision.demand is None:
        return None
    for worker_id, gpu in gpu_keys(decision):
        if context.live.starting_on((worker_id, gpu)) not in (None, instance_id):
            worker = next((w.name for w in context.scheduler.workers if w.id == worker_id), worker_id)
            return f"GPU {gpu} of {worker}"
    return None


def release_shared_gpus(context: ControlContext, instance_id: int) -> None:
    live = context.live.get(instance_id)
    if live is not None:
        live.starting_on = ()
