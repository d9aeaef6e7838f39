"""Ending engines: a stop the user asked for, a failed bring-up, an engine that exited by itself.

Every path releases the GPUs and forgets the engine only after the runtime says nothing of it is
left (reaped), so a GPU is never booked twice and no zombie stays behind.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Literal

from modelyard.control.context import ControlContext
from modelyard.control.failures import fail_start
from modelyard.control.instance_store import InstanceView
from modelyard.control.live import LiveEngine
from modelyard.control.rotation import leave_rotation
from modelyard.control.states import InstanceState
from modelyard.control.transitions import EngineStopped, Stopping
from modelyard.control.verification import diagnose_engine_log
from modelyard.runtimes.base import ExitStatus

logger = logging.getLogger(__name__)

DEFAULT_GRACE_SECONDS = 30.0
LEFTOVER_GRACE_SECONDS = 5.0


def stop_grace_seconds(context: ControlContext, instance_id: int) -> float:
    deployment = context.live.deployment_of(instance_id)
    version = context.version_or_none(deployment) if deployment is not None else None
    return DEFAULT_GRACE_SECONDS if version is None else version.stop_grace_seconds


async def stop_instance(
    context: ControlContext,
    instance_id: int,
    reason: str,
    *,
    final_state: Literal[InstanceState.STOPPED, InstanceState.ERROR] = InstanceState.STOPPED,
) -> None:
    engine = context.live.engine(instance_id)
    leave_rotation(context, instance_id)
    stopped = EngineStopped(reason=reason, final_state=final_state)
    if engine is None:
        await context.transition(instance_id, stopped)
        return
    await context.transition(instance_id, Stopping(reason=reason))
    await engine.runtime.stop(engine.handle, grace_seconds=stop_grace_seconds(context, instance_id))
    context.live.end_engine(instance_id)
    await context.transition(instance_id, stopped)


async def stop_and_delete(context: ControlContext, instance_id: int, reason: str) -> None:
    await stop_instance(context, instance_id, reason)
    await asyncio.to_thread(context.store.delete_instance, instance_id)
    context.live.release(instance_id)


async def fail_running_engine(context: ControlContext, instance_id: int, reason: str) -> None:
    """Readiness failed while the engine lives: stop it, then restart after back-off."""
    await stop_instance(context, instance_id, reason, final_state=InstanceState.ERROR)
    instance = await _current_view(context, instance_id)
    if instance is not None:
        await fail_start(context, instance, reason)


async def _current_view(context: ControlContext, instance_id: int) -> InstanceView | None:
    deployment = context.live.deployment_of(instance_id)
    if deployment is None:  # re-adopted before the first reconcile
        for candidate in await asyncio.to_thread(context.store.load_deployments):
            if any(instance.id == instance_id for instance in candidate.instances):
                deployment = candidate
    if deployment is None:
        return None
    return next((instance for instance in deployment.instances if instance.id == instance_id), None)


async def on_engine_exit(
    context: ControlContext, instance: InstanceView, engine: LiveEngine, status: ExitStatus
) -> None:
    """The engine ended by itself: record why (with the doctor's reading of its log), restart later."""
    leave_rotation(context, instance.id)
    context.live.end_engine(instance.id)
    context.tasks.cancel(instance.id, "bring-up")
    context.tasks.cancel(instance.id, "verify")
    # The launcher is gone; make sure nothing of it lingers (it could hold the GPU).
    await engine.runtime.stop(engine.handle, grace_seconds=LEFTOVER_GRACE_SECONDS)
    starting = instance.state == InstanceState.STARTING
    phase = "while starting" if starting else "while running"
    deployment = context.live.deployment_of(instance.id)
    diagnosis = await asyncio.to_thread(
        functools.partial(
            diagnose_engine_log,
            engine.log_path,
            # A SIGKILL while loading points at the OOM killer; while serving it may be anyone.
            exit_code=status.code_for_diagnosis if starting else None,
            engine=context.engine_family(deployment),
            engine_args=deployment.backend_parameters if deployment else (),
        )
    )
    reason = f"engine {status.describe()} {phase}"
    if diagnosis:
        reason += f": {diagnosis}"
    await fail_start(context, instance, reason, diagnosis=diagnosis)
    context.poke()
