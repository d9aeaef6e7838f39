"""From a launched engine to one in the gateway's rotation: readiness, then verification.

Ready means the health path answers 200 and one tiny chat request succeeds
(``readiness.py``); then the doctor's verification suite runs, unless the deployment opts out or
this start already passed it (a re-adopted engine keeps its result). A failed check keeps the
instance out of rotation in ``error`` with no restart: the user fixes the deployment or asks for
the suite again (``verification_requested_at``). The endpoint is published before the store says
running, so that no request in between is told "no ready replica".
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

import httpx

from modelyard.backends.spec import BackendVersion
from modelyard.control.context import ControlContext, LiveEngine
from modelyard.control.engine_key import authorization_headers
from modelyard.control.instance_store import DeploymentView
from modelyard.control.readiness import (
    HEALTH_POLL_INTERVAL_SECONDS,
    ReadinessTarget,
    health_answers,
    tiny_chat,
)
from modelyard.control.rotation import publish_one, unpublish_one
from modelyard.control.stall_watch import StallWatch
from modelyard.control.states import InstanceState
from modelyard.control.stopping import fail_running_engine
from modelyard.control.verification import diagnose_engine_log, run_verification

logger = logging.getLogger(__name__)


async def verify(
    context: ControlContext, deployment: DeploymentView, engine: LiveEngine, version: BackendVersion
) -> list[dict[str, Any]]:
    async def run(client: httpx.AsyncClient) -> list[dict[str, Any]]:
        return await run_verification(
            client=client,
            base_url=engine.base_url,
            served_model_name=context.served_name(deployment),
            deployment_name=deployment.name,
            version=version,
            model_details=deployment.model_details,
        )

    if not engine.api_key:
        return await run(context.client)
    # The engine asks for its own key: every check sends it.
    async with httpx.AsyncClient(
        timeout=context.client.timeout, trust_env=False, headers=authorization_headers(engine.api_key)
    ) as client:
        return await run(client)


def failed_summary(results: list[dict[str, Any]]) -> str | None:
    failed = [result for result in results if result.get("status") == "failed"]
    if not failed:
        return None
    return "; ".join(f"{result['check_id']}: {result.get('message', '')}" for result in failed)


async def _wait_for_health_watching_the_log(
    context: ControlContext,
    deployment: DeploymentView,
    instance_id: int,
    engine: LiveEngine,
    target: ReadinessTarget,
) -> None:
    """Poll the health path; meanwhile, a log with no new line for ``stall_seconds`` is reported
    on the instance (it stays starting: a silent load is not yet a failure)."""
    watch = StallWatch(engine.log_path, context.clock, context.options.stall_seconds)
    while not await health_answers(context.client, target):
        quiet = watch.stalled_for()
        if quiet is not None:
            diagnosis = await asyncio.to_thread(
                functools.partial(
                    diagnose_engine_log,
                    engine.log_path,
                    engine=context.engine_family(deployment),
                    engine_args=deployment.backend_parameters,
                    stalled_seconds=quiet,
                )
            )
            await context.transition(
                instance_id,
                InstanceState.STARTING,
                f"starting, but the engine has printed nothing for {quiet:.0f} s"
                + (f": {diagnosis}" if diagnosis else ""),
                diagnosis=diagnosis,
            )
        await asyncio.sleep(HEALTH_POLL_INTERVAL_SECONDS)


async def bring_up(
    context: ControlContext,
    deployment: DeploymentView,
    instance_id: int,
    engine: LiveEngine,
    version: BackendVersion,
    *,
    verified: bool,
) -> None:
    """Wait for readiness, verify (unless ``verified`` already), publish, record running."""
    target = ReadinessTarget(
        base_url=engine.base_url,
        health_path=version.health_path,
        served_model_name=context.served_name(deployment),
        headers=authorization_headers(engine.api_key),
    )
    started = context.clock.monotonic()
    timeout = context.options.startup_timeout_seconds
    try:
        async with asyncio.timeout(timeout):
            await _wait_for_health_watching_the_log(context, deployment, instance_id, engine, target)
    except TimeoutError:
        await fail_running_engine(context, instance_id, f"not healthy after {timeout:.0f} s")
        return
    problem = await tiny_chat(context.client, target)
    if problem is not None:
        await fail_running_engine(context, instance_id, problem)
        return
    results: list[dict[str, Any]] = []
    ran_verification = not deployment.skip_verification and not verified
    if ran_verification:
        results = await verify(context, deployment, engine, version)
        summary = failed_summary(results)
        if summary is not None:
            await context.transition(
                instance_id,
                InstanceState.ERROR,
                f"verification failed, kept out of rotation: {summary}",
                verification=results,
                verified_at=context.clock.now(),
                next_start_at=None,
            )
            return
    elapsed = context.clock.monotonic() - started
    context.failures.pop(instance_id, None)
    publish_one(context, deployment, instance_id)
    fields: dict[str, Any] = {"ready_at": context.clock.now()}
    if ran_verification:
        fields.update(verification=results, verified_at=context.clock.now())
    await context.transition(
        instance_id,
        InstanceState.RUNNING,
        f"ready in {elapsed:.1f} s (health {version.health_path} answered, chat request succeeded)",
        **fields,
    )
    context.poke()


async def reverify(
    context: ControlContext,
    deployment: DeploymentView,
    instance_id: int,
    engine: LiveEngine,
    version: BackendVersion,
) -> None:
    """The verification suite again on a live engine (asked for by a user): back into rotation
    when it passes, out of it when it fails."""
    results = await verify(context, deployment, engine, version)
    now = context.clock.now()
    summary = failed_summary(results)
    if summary is not None:
        unpublish_one(context, deployment.name, instance_id)
        await context.transition(
            instance_id,
            InstanceState.ERROR,
            f"verification run again and failed, kept out of rotation: {summary}",
            verification=results,
            verified_at=now,
            next_start_at=None,
        )
        return
    publish_one(context, deployment, instance_id)
    await context.transition(
        instance_id,
        InstanceState.RUNNING,
        f"verification run again on request: {len(results)} check(s) passed",
        verification=results,
        verified_at=now,
        record_event=True,
    )
    context.poke()
