"""One reconcile pass: for each deployment, make its instances match what the user asked for.

Per instance at most one step a pass: notice that its engine exited, stop it (scaled down,
stopped, removed), start it (placed, back-off passed), or verify it again on request. Slow work
(readiness, a stop's grace period, verification) runs in the instance's task, so a pass never
waits on an engine.

Every step runs under ``guarded``: an exception while handling one instance becomes that
instance's ``error`` state and reason, and the pass goes on with the next instance and
deployment. One deployment can never stop the others from being started, scaled or removed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

from modelyard.control.bring_up import reverify
from modelyard.control.context import ControlContext
from modelyard.control.failures import fail_start
from modelyard.control.instance_store import DeploymentView, InstanceView
from modelyard.control.launch import start_instance
from modelyard.control.rotation import publish_all
from modelyard.control.states import InstanceState
from modelyard.control.stopping import on_engine_exit, stop_and_delete, stop_instance
from modelyard.control.transitions import EngineStopped

logger = logging.getLogger(__name__)

# States in which an instance with an engine may have its verification suite run again.
_VERIFIABLE = frozenset({InstanceState.RUNNING, InstanceState.ERROR, InstanceState.STARTING})


async def guarded(context: ControlContext, instance: InstanceView, step: Awaitable[None], what: str) -> None:
    """Run one instance's step; a failure becomes its state, never the pass's."""
    try:
        await step
    except Exception as error:
        logger.exception("instance %s: %s failed", instance.id, what)
        if context.live.engine(instance.id) is not None:
            return  # it holds an engine: keep it, the next pass looks again
        try:
            await fail_start(
                context, instance, f"internal error while {what}: {type(error).__name__}: {error}"
            )
        except Exception:
            logger.exception("instance %s: could not record the failure either", instance.id)


async def reconcile_deployment(context: ControlContext, deployment: DeploymentView) -> None:
    if deployment.desired_state == "running":
        await _reconcile_running(context, deployment)
    else:
        await _reconcile_stopped(context, deployment)
    publish_all(context, deployment)


async def _reconcile_running(context: ControlContext, deployment: DeploymentView) -> None:
    present = {instance.replica_index for instance in deployment.instances}
    missing = [index for index in range(deployment.replicas) if index not in present]
    if missing:
        await asyncio.to_thread(context.store.create_instances, deployment.id, missing)
        context.poke()
    for instance in deployment.instances:
        await guarded(context, instance, _step_running(context, deployment, instance), "reconciling it")


async def _noticed_exit(context: ControlContext, instance: InstanceView) -> bool:
    """If the instance's engine has exited (also while it was starting), handle it; True then."""
    engine = context.live.engine(instance.id)
    if engine is None or context.tasks.kind(instance.id) == "stop":
        return False
    status = await engine.runtime.exit_status(engine.handle)
    if status is None:
        return False
    await on_engine_exit(context, instance, engine, status)
    return True


async def _step_running(context: ControlContext, deployment: DeploymentView, instance: InstanceView) -> None:
    if await _noticed_exit(context, instance):
        return
    if instance.replica_index >= deployment.replicas:
        if context.tasks.kind(instance.id) != "stop":
            context.tasks.cancel(instance.id, "bring-up")
            context.tasks.cancel(instance.id, "verify")
            context.tasks.spawn(instance.id, stop_and_delete(context, instance.id, "scaled down"), "stop")
        return
    if context.tasks.busy(instance.id):
        return
    engine = context.live.engine(instance.id)
    if engine is not None:
        if instance.verification_due(context.clock.now()) and instance.state in _VERIFIABLE:
            version = context.version_or_none(deployment)
            if version is not None:
                # Starting with an engine and no task: it waits for a retry of its verification.
                asked_by_user = instance.state != InstanceState.STARTING
                context.tasks.spawn(
                    instance.id,
                    reverify(context, deployment, instance.id, engine, version, asked_by_user=asked_by_user),
                    "verify",
                )
        return
    if instance.state == InstanceState.ERROR and instance.next_start_at is None:
        return  # failed for a reason a restart cannot fix; waits for the user
    if instance.next_start_at is None or instance.next_start_at <= context.clock.now():
        await start_instance(context, deployment, instance)


async def _reconcile_stopped(context: ControlContext, deployment: DeploymentView) -> None:
    deleting = deployment.desired_state == "deleted"
    reason = "deployment removed" if deleting else "deployment stopped"
    for instance in deployment.instances:
        await guarded(context, instance, _step_stopped(context, instance, reason), "stopping it")
    busy = any(
        context.tasks.busy(instance.id) or context.live.engine(instance.id) is not None
        for instance in deployment.instances
    )
    if deleting and not busy:
        await asyncio.to_thread(context.store.delete_deployment, deployment.id)
        for instance in deployment.instances:
            context.live.release(instance.id)
        context.live.forget_deployment(deployment.id)
        context.endpoints.forget(deployment.name)
        logger.info("deployment %s removed", deployment.name)


async def _step_stopped(context: ControlContext, instance: InstanceView, reason: str) -> None:
    if context.tasks.kind(instance.id) == "stop":
        return
    context.tasks.cancel(instance.id, "bring-up")
    context.tasks.cancel(instance.id, "verify")
    if context.live.engine(instance.id) is not None:
        context.tasks.spawn(instance.id, stop_instance(context, instance.id, reason), "stop")
    elif instance.state != InstanceState.STOPPED:
        await context.transition(instance.id, EngineStopped(reason=reason))
