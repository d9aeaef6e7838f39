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

import logging

from modelyard.backends.render import render_launch
from modelyard.control.bring_up import bring_up
from modelyard.control.context import ControlContext, LiveEngine
from modelyard.control.engine_key import engine_api_key
from modelyard.control.failures import fail_start
from modelyard.control.instance_store import DeploymentView, InstanceView
from modelyard.control.placement import place_instance
from modelyard.control.states import InstanceState
from modelyard.errors import ModelyardError, Unschedulable
from modelyard.runtimes.base import EngineIdentity, LaunchSpec
from modelyard.secret_names import MASK, is_secret_env_name, mask_arguments, secret_argument_indexes
from modelyard.store.tables import new_uid

logger = logging.getLogger(__name__)


def instance_label(deployment: DeploymentView, instance: InstanceView) -> str:
    return f"{deployment.name}/replica-{instance.replica_index}"


async def _wait(context: ControlContext, instance: InstanceView, reason: str) -> None:
    if instance.state != InstanceState.PENDING or instance.reason != reason:
        await context.transition(instance.id, InstanceState.PENDING, reason)


async def start_instance(context: ControlContext, deployment: DeploymentView, instance: InstanceView) -> None:
    try:
        version = context.catalog.resolve_version(deployment.backend, deployment.backend_version)
    except ModelyardError as error:
        await _wait(context, instance, f"waiting for the backend: {error}")
        return
    try:
        gpu_ids = place_instance(
            instance_id=instance.id,
            gpus_per_replica=deployment.gpus_per_replica,
            gpu_ids=deployment.gpu_ids,
            inventory=context.inventory,
            ledger=context.ledger,
        )
    except Unschedulable as error:
        await _wait(context, instance, f"waiting for placement: {error}")
        return
    runtime = context.runtimes.for_version(version)
    start_number = instance.start_count + 1
    folder = context.settings.instances_dir / instance.uid
    log_path = folder / f"start-{start_number}.log"
    try:
        address = await runtime.allocate_address(context.options.worker_ip)
        parameters = context.secrets.reveal_arguments(deployment.backend_parameters)
        env = context.secrets.reveal_env(deployment.env)
        launch = render_launch(
            version,
            model_path=runtime.engine_model_path(deployment.model_path),
            port=address.port,
            worker_ip=address.bind_host,
            model_name=deployment.name,
            gpu_ids=gpu_ids,
            backend_parameters=parameters,
            env=env,
        )
    except (ModelyardError, OSError) as error:
        await fail_start(context, instance, f"cannot launch: {error}")
        return
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
        arguments=launch.arguments,
        env=launch.env,
        gpu_ids=gpu_ids,
        model_path=deployment.model_path,
        address=address,
        log_path=log_path,
        working_directory=folder / "work",
        image=launch.image,
        secrets=secrets,
    )
    where = f"GPUs {','.join(map(str, gpu_ids))}" if gpu_ids else "CPU"
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
        mounts=[mount.to_json() for mount in runtime.mounts(deployment.model_path)],
        command=masked_command(launch.argv, secrets),
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
    context.ledger.book(instance.id, instance_label(deployment, instance), gpu_ids)
    context.launching.add(token)
    try:
        started = await runtime.start(spec)
    except ModelyardError as error:
        context.ledger.release(instance.id)
        await fail_start(context, instance, f"cannot launch: {error}")
        return
    finally:
        context.launching.discard(token)
    engine = LiveEngine(
        runtime=runtime,
        handle=started.handle,
        log_path=log_path,
        base_url=address.base_url,
        launch_token=token,
        api_key=engine_api_key(parameters, env),
    )
    context.engines[instance.id] = engine
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
        instance.id, bring_up(context, deployment, instance.id, engine, version, verified=False), "bring-up"
    )


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
