"""Starting one instance: place it, render its command, record the intent, then launch.

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

from modelyard.backends.multi_node import rank_arguments
from modelyard.backends.render import GPU_VARIABLE, render_launch
from modelyard.backends.spec import BackendVersion
from modelyard.control.bring_up import bring_up
from modelyard.control.context import ControlContext
from modelyard.control.cpu_threads import ThreadSizing, size_threads, usable_cores
from modelyard.control.engine_key import engine_api_key
from modelyard.control.failures import fail_start
from modelyard.control.image_pulls import image_ready
from modelyard.control.instance_store import DeploymentView, InstanceView
from modelyard.control.live import LiveEngine
from modelyard.control.memory_demand import KNOB_FLAGS
from modelyard.control.placement import Decision, decide, demand_of, placement_to_json
from modelyard.control.start_observations import load_observations
from modelyard.control.states import InstanceState
from modelyard.errors import ModelyardError, Unschedulable
from modelyard.runtimes.base import EngineIdentity, LaunchSpec, RankLaunch, Runtime
from modelyard.runtimes.ray_connection import local_node_id
from modelyard.secret_names import MASK, is_secret_env_name, mask_arguments, secret_argument_indexes
from modelyard.store.tables import new_uid

logger = logging.getLogger(__name__)


def instance_label(deployment: DeploymentView, instance: InstanceView) -> str:
    return f"{deployment.name}/replica-{instance.replica_index}"


async def _wait(context: ControlContext, instance: InstanceView, reason: str) -> None:
    if instance.state != InstanceState.PENDING or instance.reason != reason:
        await context.transition(instance.id, InstanceState.PENDING, reason)


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
    """On a cluster, every engine runs through Ray on the chosen worker (a container through
    that worker's Docker engine); on a single host, a process or a container here."""
    if context.runtimes.ray is not None:
        return context.runtimes.ray
    return context.runtimes.for_version(version)


async def start_instance(context: ControlContext, deployment: DeploymentView, instance: InstanceView) -> None:
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
        await _wait(context, instance, f"waiting for placement: {error}")
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
    seen = context.runtimes.for_version(version)
    ranks = decision.placement.ranks
    on_cluster = runtime.kind == "ray"
    rank0_node = ranks[0].worker_id if on_cluster else None
    if not image_ready(context, deployment, instance, version, runtime, node_id=rank0_node):
        return  # its pull step runs first (the `pulling` stage, on the chosen worker), then it goes on
    gpu_ids = list(ranks[0].gpu_ids)
    start_number = instance.start_count + 1
    folder = context.settings.instances_dir / instance.uid
    log_path = folder / f"start-{start_number}.log"
    knob = decision.knob_arguments(parameters)
    try:
        address = await runtime.allocate_address(context.options.worker_ip, node_id=rank0_node)
        launch = render_launch(
            version,
            model_path=seen.engine_model_path(deployment.model_path),
            port=address.port,
            worker_ip=address.bind_host,
            model_name=deployment.name,
            gpu_ids=gpu_ids,
            backend_parameters=[*parameters, *knob],
            env=env,
        )
        worker_ranks: tuple[RankLaunch, ...] = ()
        arguments = launch.arguments
        if len(ranks) > 1:
            master = await runtime.allocate_address(context.options.worker_ip, node_id=rank0_node)

            def extra(rank: int) -> list[str]:
                return rank_arguments(
                    version,
                    rank=rank,
                    nnodes=len(ranks),
                    master_addr=address.reach_host,
                    master_port=master.port,
                )

            arguments = [*launch.arguments, *extra(0)]
            worker_ranks = tuple(
                RankLaunch(
                    rank=number,
                    node_id=rank.worker_id,
                    gpu_ids=list(rank.gpu_ids),
                    program=launch.program,
                    arguments=[*launch.arguments, *extra(number)],
                    env={GPU_VARIABLE: ",".join(str(gpu) for gpu in rank.gpu_ids)},
                )
                for number, rank in enumerate(ranks[1:], start=1)
            )
    except (ModelyardError, OSError) as error:
        await fail_start(context, instance, f"cannot launch: {error}")
        return
    on_cpu = not gpu_ids and not on_cluster
    launch_env = dict(launch.env)
    sizing = _thread_sizing(context, version, launch_env, instance.id) if on_cpu else None
    if sizing is not None:
        launch_env.update(sizing.env)
    token = new_uid()
    secrets = secret_values(deployment, parameters, env)
    spec = LaunchSpec(
        identity=EngineIdentity(
            owner=context.owner,
            launch_token=token,
            deployment=deployment.name,
            instance_uid=instance.uid,
            replica_index=instance.replica_index,
            start_number=start_number,
        ),
        program=launch.program,
        arguments=arguments,
        env=launch_env,
        gpu_ids=gpu_ids,
        model_path=deployment.model_path,
        address=address,
        log_path=log_path,
        working_directory=folder / "work",
        image=launch.image,
        secrets=secrets,
        node_id=rank0_node,
        worker_ranks=worker_ranks,
    )
    where = _where(decision, on_cluster)
    if sizing is not None:
        where += f"; {sizing.describe()}"
    await context.transition(
        instance.id,
        InstanceState.STARTING,
        f"launching on the {runtime.kind} runtime ({where})",
        runtime=runtime.kind,
        launch_token=token,
        handle=None,
        pid=None,
        process_start_time=None,
        host=address.reach_host,
        port=address.reach_port,
        engine_port=address.port,
        gpu_ids=gpu_ids,
        placement=placement_to_json(decision),
        mounts=[mount.to_json() for mount in seen.mounts(deployment.model_path)],
        command=masked_command([*launch.program, *arguments], secrets),
        log_path=str(log_path),
        start_count=start_number,
        started_at=context.clock.now(),
        ready_at=None,
        next_start_at=None,
        diagnosis=None,
        verification=[],
        verified_at=None,
        # A request to verify again was for the engine that ran until now, not for this one: kept,
        # it would run the suite on every later start, even of a deployment that skips it.
        verification_requested_at=None,
    )
    context.scheduler.book(instance.id, instance_label(deployment, instance), decision.placement)
    live.launching_token = token
    if decision.demand is not None:
        live.starting_on = tuple(_gpu_keys(decision))
    try:
        started = await runtime.start(spec)
    except ModelyardError as error:
        context.scheduler.release(instance.id)
        release_shared_gpus(context, instance.id)
        await fail_start(context, instance, f"cannot launch: {error}")
        return
    finally:
        live.launching_token = None
    engine = LiveEngine(
        runtime=runtime,
        handle=started.handle,
        log_path=log_path,
        base_url=address.base_url,
        launch_token=token,
        on_cpu=on_cpu,
        api_key=engine_api_key(parameters, env),
    )
    live.engine = engine
    pid, start_time = process_identity(started.handle.runtime, started.handle.id)
    await context.transition(
        instance.id,
        InstanceState.STARTING,
        f"engine {started.handle.label} starting at {address.base_url} ({where})",
        handle=started.handle.to_json(),
        pid=pid,
        process_start_time=start_time,
        command=masked_command(started.command, secrets),
    )
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


def _thread_sizing(
    context: ControlContext, version: BackendVersion, launch_env: dict[str, str], instance_id: int
) -> ThreadSizing | None:
    """The thread variables of a CPU engine on this host: its share of the usable cores."""
    if not version.cpu_threads_env:
        return None
    engines = context.live.engines().items()
    others = sum(1 for held_id, held in engines if held.on_cpu and held_id != instance_id)
    return size_threads(
        version.cpu_threads_env,
        launch_env=launch_env,
        server_env=context.environment,
        usable_cores=context.options.cpu_cores or usable_cores(),
        cpu_engines=others + 1,
    )


def _gpu_keys(decision: Decision) -> list[tuple[str, int]]:
    return [(rank.worker_id, gpu) for rank in decision.placement.ranks for gpu in rank.gpu_ids]


def shared_gpu_starting(context: ControlContext, decision: Decision, instance_id: int) -> str | None:
    """A GPU of ``decision`` shared by memory on which another engine is starting ("GPU 0 of
    node-a"), or None: engines placed by memory start one at a time on each GPU."""
    if decision.demand is None:
        return None
    for worker_id, gpu in _gpu_keys(decision):
        if context.live.starting_on((worker_id, gpu)) not in (None, instance_id):
            worker = next((w.name for w in context.scheduler.workers if w.id == worker_id), worker_id)
            return f"GPU {gpu} of {worker}"
    return None


def release_shared_gpus(context: ControlContext, instance_id: int) -> None:
    live = context.live.get(instance_id)
    if live is not None:
        live.starting_on = ()


def _where(decision: Decision, on_cluster: bool) -> str:
    """Where a start goes, for its reason: "GPUs 0,1", "node-a GPU 0 + node-b GPU 0", "CPU",
    with the memory knob set from the estimate."""
    parts = []
    for rank in decision.placement.ranks:
        gpus = (
            f"GPU{'s' if len(rank.gpu_ids) > 1 else ''} {','.join(map(str, rank.gpu_ids))}"
            if rank.gpu_ids
            else "CPU"
        )
        parts.append(f"{rank.worker_name} {gpus}" if on_cluster else gpus)
    text = " + ".join(parts)
    if decision.demand is not None and decision.memory_fraction is not None:
        text += f"; {decision.demand.knob} {decision.memory_fraction:g} for {decision.demand.summary()}"
    return text


def secret_values(deployment: DeploymentView, parameters: list[str], env: dict[str, str]) -> frozenset[str]:
    """The clear values that must never be shown: sealed ones, secret env values, secret flags'."""
    values = {value for name, value in env.items() if value != deployment.env.get(name)}
    values |= {value for name, value in env.items() if is_secret_env_name(name)}
    for index in secret_argument_indexes(parameters):
        argument = parameters[index]
        values.add(argument.split("=", 1)[1] if argument.startswith("-") else argument)
    stored = deployment.backend_parameters
    values |= {value for value, kept in zip(parameters, stored, strict=False) if value != kept}
    return frozenset(value for value in values if value)


def masked_command(argv: list[str], secrets: frozenset[str]) -> list[str]:
    """The command as ``ps`` and the API show it: secret flags' values and every secret masked."""
    shown = []
    for argument in mask_arguments(argv):
        for secret in secrets:
            argument = argument.replace(secret, MASK)
        shown.append(argument)
    return shown


def process_identity(runtime: str, handle_id: str) -> tuple[int | None, float | None]:
    """(pid, start time) for a process engine, shown to people; (None, None) otherwise."""
    if runtime != "process":
        return None, None
    pid_text, _, start_text = handle_id.partition(":")
    try:
        return int(pid_text), float(start_text or 0.0)
    except ValueError:
        return None, None
