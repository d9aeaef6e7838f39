"""When the server starts: take back the engines a previous server left running, stop the rest.

Every runtime is asked for the live engines carrying this server's owner id
(``Runtime.find_engines``). An engine whose launch token is an instance's current token (or whose
handle an instance recorded) is re-adopted: a healthy engine of a running instance goes back into
the gateway's rotation at once, keeping its verification result; one still starting goes through
readiness again. Every other engine is an orphan (a second start of a replica, or an engine of a
removed deployment) and is stopped. Live instances whose engine is gone restart at once.

``sweep_orphans`` repeats the orphan half from time to time while the server runs, for engines
whose start failed half-way (a killed ``docker run`` may leave a container behind).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from modelyard.control.bring_up import bring_up
from modelyard.control.context import ControlContext
from modelyard.control.engine_key import authorization_headers, engine_api_key
from modelyard.control.instance_store import DeploymentView, InstanceView
from modelyard.control.launch import instance_label
from modelyard.control.live import LiveEngine
from modelyard.control.placement import placement_from_json
from modelyard.control.readiness import ReadinessTarget, health_answers
from modelyard.control.rotation import publish_one
from modelyard.control.states import InstanceState
from modelyard.control.transitions import EngineGone, Readopted
from modelyard.errors import ModelyardError
from modelyard.runtimes.base import EngineAddress, EngineHandle, FoundEngine, Runtime

logger = logging.getLogger(__name__)

LIVE_STATES = frozenset({InstanceState.STARTING, InstanceState.RUNNING, InstanceState.STOPPING})


async def _found_engines(context: ControlContext) -> list[tuple[Runtime, FoundEngine]]:
    found: list[tuple[Runtime, FoundEngine]] = []
    for runtime in context.runtimes.all():
        try:
            engines = await runtime.find_engines(context.owner)
        except Exception:  # one runtime that cannot answer must not keep the others from starting
            logger.exception("the %s runtime could not list its engines", runtime.kind)
            continue
        found += [(runtime, engine) for engine in engines]
    return found


def _wanted(deployment: DeploymentView, instance: InstanceView) -> bool:
    return deployment.desired_state == "running" and instance.replica_index < deployment.replicas


async def adopt_survivors(context: ControlContext, deployments: list[DeploymentView]) -> None:
    found = await _found_engines(context)
    by_token = {
        engine.identity.launch_token: (runtime, engine)
        for runtime, engine in found
        if engine.identity.launch_token
    }
    claimed: set[tuple[str, str]] = set()
    for deployment in deployments:
        for instance in deployment.instances:
            match = by_token.get(instance.launch_token or "")
            runtime, handle = (match[0], match[1].handle) if match else (None, None)
            if handle is None and instance.handle is not None:
                runtime = context.runtimes.by_kind(instance.handle.runtime)
                if await runtime.exit_status(instance.handle) is None:
                    handle = instance.handle
            if runtime is None or handle is None:
                await _engine_gone(context, instance)
                continue
            claimed.add((runtime.kind, handle.id))
            await _adopt_one(context, deployment, instance, runtime, handle)
    orphans = [
        (runtime, engine) for runtime, engine in found if (runtime.kind, engine.handle.id) not in claimed
    ]
    await stop_orphans(context, orphans)


async def _engine_gone(context: ControlContext, instance: InstanceView) -> None:
    if instance.state in LIVE_STATES:
        gone = EngineGone(
            reason="the engine was gone when the server started; restarting it",
            next_start_at=context.clock.now(),
        )
        await context.transition(instance.id, gone)


async def _adopt_one(
    context: ControlContext,
    deployment: DeploymentView,
    instance: InstanceView,
    runtime: Runtime,
    handle: EngineHandle,
) -> None:
    log_path = (
        Path(instance.log_path)
        if instance.log_path
        else context.settings.instances_dir / instance.uid / f"start-{max(1, instance.start_count)}.log"
    )
    await runtime.resume(handle, log_path)
    address = EngineAddress(
        bind_host=instance.host,
        port=instance.port or 0,
        reach_host=instance.host,
        reach_port=instance.port or 0,
    )
    engine = LiveEngine(
        runtime=runtime,
        handle=handle,
        log_path=log_path,
        base_url=address.base_url,
        launch_token=instance.launch_token,
        on_cpu=not instance.gpu_ids and runtime.kind != "ray",
        api_key=_engine_key(context, deployment),
    )
    context.live.of(instance.id).engine = engine
    context.scheduler.book(
        instance.id,
        instance_label(deployment, instance),
        placement_from_json(instance.placement, instance.host, instance.gpu_ids),
    )
    pid, start_time = runtime.host_process(handle) or (None, None)

    def readopted(to: InstanceState, reason: str, *, announce: bool = False) -> Readopted:
        return Readopted(
            reason=reason,
            to=to,
            handle=handle.to_json(),
            pid=pid,
            process_start_time=start_time,
            announce=announce,
        )

    if not _wanted(deployment, instance):
        await context.transition(instance.id, readopted(instance.state, instance.reason))
        return  # the reconcile loop stops it
    version = context.version_or_none(deployment)
    verified = instance.verified_at is not None and not any(
        result.get("status") == "failed" for result in instance.verification
    )
    if version is not None and instance.state == InstanceState.RUNNING:
        target = ReadinessTarget(
            engine.base_url,
            version.health_path,
            context.served_name(deployment),
            headers=authorization_headers(engine.api_key),
        )
        if await health_answers(context.client, target):
            publish_one(context, deployment, instance.id)
            back = (
                f"re-adopted engine {handle.label} after a server restart; health answered, back in rotation"
            )
            await context.transition(instance.id, readopted(InstanceState.RUNNING, back, announce=True))
            return
    if version is None:
        gone = "re-adopted, but its backend version is gone"
        await context.transition(instance.id, readopted(InstanceState.ERROR, gone))
        return
    checking = f"re-adopted engine {handle.label}; checking readiness"
    await context.transition(instance.id, readopted(InstanceState.STARTING, checking))
    context.tasks.spawn(
        instance.id,
        bring_up(
            context,
            deployment,
            instance.id,
            engine,
            version,
            verified=verified or deployment.skip_verification,
        ),
        "bring-up",
    )


def _engine_key(context: ControlContext, deployment: DeploymentView) -> str | None:
    try:
        parameters = context.secrets.reveal_arguments(deployment.backend_parameters)
        env = context.secrets.reveal_env(deployment.env)
    except ModelyardError:
        logger.warning("deployment %s: its sealed values cannot be opened here", deployment.name)
        return None
    return engine_api_key(parameters, env)


async def stop_orphans(context: ControlContext, orphans: list[tuple[Runtime, FoundEngine]]) -> None:
    """Stop engines no instance claims, all at once (each gets ``orphan_grace_seconds``)."""

    async def stop_one(runtime: Runtime, engine: FoundEngine) -> None:
        identity = engine.identity
        logger.warning(
            "stopping orphaned engine %s (deployment %r, replica %s, start %s): no instance claims it",
            engine.handle.label,
            identity.deployment,
            identity.replica_index,
            identity.start_number,
        )
        try:
            await runtime.stop(engine.handle, grace_seconds=context.options.orphan_grace_seconds)
        except Exception:
            logger.exception("could not stop orphaned engine %s", engine.handle.label)

    await asyncio.gather(*(stop_one(runtime, engine) for runtime, engine in orphans))


async def sweep_orphans(context: ControlContext) -> None:
    """Engines of this owner that no instance holds and no start in flight will claim."""
    engines = context.live.engines().values()
    held = {(engine.runtime.kind, engine.handle.id) for engine in engines}
    held_tokens = {engine.launch_token for engine in engines if engine.launch_token}
    launching = context.live.launching_tokens()
    orphans = [
        (runtime, engine)
        for runtime, engine in await _found_engines(context)
        if (runtime.kind, engine.handle.id) not in held
        and engine.identity.launch_token not in held_tokens
        and engine.identity.launch_token not in launching
    ]
    if orphans:
        await stop_orphans(context, orphans)
