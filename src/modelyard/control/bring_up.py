"""From a launched engine to one in the gateway's rotation: readiness, then verification.

Ready means the health path answers 200 and one tiny chat request succeeds
(``readiness.py``); then the doctor's verification suite runs, unless the deployment opts out or
this start already passed it (a re-adopted engine keeps its result). Its time limits follow the
engine's measured speed (``verify.speed``). A failed suite keeps the instance out of rotation:

- failed for want of an answer only (a time limit, a refused connection, HTTP 503: a busy engine),
  the instance stays ``starting`` and the suite runs again after a back-off (10 s, 20 s, ... 300 s
  by default; ``verification_requested_at`` holds when), until it passes and the instance enters
  the rotation;
- failed on what the engine answered (a missing parser, a wrong model name), it is ``error`` with
  no restart: the user fixes the deployment or asks for the suite again (``modelyard verify``).

The endpoint is published before the store says running, so that no request in between is told
"no ready replica".
"""

from __future__ import annotations

import asyncio
import functools
import logging
from datetime import timedelta
from typing import Any, Literal

import httpx

from modelyard.backends.spec import BackendVersion
from modelyard.control.context import ControlContext
from modelyard.control.engine_key import authorization_headers
from modelyard.control.instance_store import DeploymentView
from modelyard.control.live import LiveEngine
from modelyard.control.readiness import (
    HEALTH_POLL_INTERVAL_SECONDS,
    ReadinessTarget,
    health_answers,
    tiny_chat,
)
from modelyard.control.rotation import publish_one, unpublish_one
from modelyard.control.stall_watch import StallWatch
from modelyard.control.start_check import check_start
from modelyard.control.stopping import fail_running_engine
from modelyard.control.transitions import (
    Ready,
    Reverified,
    Reverifying,
    StartStalled,
    VerificationFailed,
    VerificationRetrying,
)
from modelyard.control.verification import (
    diagnose_engine_log,
    failed_summary,
    run_verification,
    worth_retrying,
)

logger = logging.getLogger(__name__)

# Why the suite runs: a new start, a retry after a busy engine failed it, or a user's request.
VerificationOccasion = Literal["start", "retry", "request"]


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
            options=context.options,
        )

    if not engine.api_key:
        return await run(context.client)
    # The engine asks for its own key: every check sends it.
    async with httpx.AsyncClient(
        timeout=context.client.timeout, trust_env=False, headers=authorization_headers(engine.api_key)
    ) as client:
        return await run(client)


async def _wait_for_health_watching_the_log(
    context: ControlContext,
    deployment: DeploymentView,
    instance_id: int,
    engine: LiveEngine,
    target: ReadinessTarget,
) -> None:
    """Poll the health path; meanwhile, a log with no new line for ``stall_seconds`` is reported
    on the instance with the doctor's reading of where it stopped (``log.stalled``: the stage and
    its fix); it stays starting: a silent load is not yet a failure."""
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
                    stall_after_seconds=context.options.stall_seconds,
                )
            )
            # The state stays starting: the event is what tells the replica's history.
            reason = f"starting, but the engine has printed nothing for {quiet:.0f} s" + (
                f": {diagnosis}" if diagnosis else ""
            )
            await context.transition(instance_id, StartStalled(reason=reason, diagnosis=diagnosis))
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
    results: list[dict[str, Any]] | None = None
    verified_at = None
    passed = ""
    if not deployment.skip_verification and not verified:
        results = await _judge(context, deployment, instance_id, engine, version, occasion="start")
        if results is None:
            return
        verified_at = context.clock.now()
        passed = f", {_passed_count(results)} verification check(s) passed"
    elapsed = context.clock.monotonic() - started
    _enter_rotation(context, deployment, instance_id)
    ready = Ready(
        reason=f"ready in {elapsed:.1f} s (health {version.health_path} answered, chat request "
        f"succeeded{passed})",
        ready_at=context.clock.now(),
        verification=results,
        verified_at=verified_at,
    )
    await context.transition(instance_id, ready)
    await check_start(context, deployment, instance_id, engine, version.version)
    context.poke()


def _passed_count(results: list[dict[str, Any]]) -> int:
    return sum(1 for result in results if result.get("status") == "passed")


def _enter_rotation(context: ControlContext, deployment: DeploymentView, instance_id: int) -> None:
    live = context.live.of(instance_id)
    live.start_failures = live.verification_failures = 0
    publish_one(context, deployment, instance_id)


def _retry_delay_seconds(context: ControlContext, attempts: int) -> float:
    options = context.options
    delay = options.verification_retry_initial_seconds * 2 ** (attempts - 1)
    return float(min(delay, options.verification_retry_max_seconds))


async def _judge(
    context: ControlContext,
    deployment: DeploymentView,
    instance_id: int,
    engine: LiveEngine,
    version: BackendVersion,
    *,
    occasion: VerificationOccasion,
) -> list[dict[str, Any]] | None:
    """Run the suite. Passed: its results (the caller puts the instance into rotation). Failed:
    None, the instance out of rotation, ``starting`` with the next run scheduled when only
    answers were missing, ``error`` when an answer was wrong."""
    results = await verify(context, deployment, engine, version)
    summary = failed_summary(results)
    if summary is None:
        return results
    now = context.clock.now()
    live = context.live.of(instance_id)
    attempt = live.verification_failures + 1
    unpublish_one(context, deployment.name, instance_id)
    if worth_retrying(results):
        live.verification_failures = attempt
        delay_seconds = _retry_delay_seconds(context, attempt)
        retrying = VerificationRetrying(
            reason=f"verification attempt {attempt} failed, out of rotation: {summary}; the engine "
            f"answered too slowly or not at all, so the suite runs again in {delay_seconds:.0f} s",
            verification=results,
            verified_at=now,
            retry_at=now + timedelta(seconds=delay_seconds),
        )
        await context.transition(instance_id, retrying)
        return None
    live.verification_failures = 0
    again = " run again and" if occasion == "request" else ""
    failed = VerificationFailed(
        reason=f"verification{again} failed, kept out of rotation: {summary}; it is not retried: fix "
        f"the deployment, then `modelyard verify {deployment.name}` runs it again",
        verification=results,
        verified_at=now,
    )
    await context.transition(instance_id, failed)
    return None


async def reverify(
    context: ControlContext,
    deployment: DeploymentView,
    instance_id: int,
    engine: LiveEngine,
    version: BackendVersion,
    *,
    asked_by_user: bool,
) -> None:
    """The verification suite again on a live engine, asked for by a user or scheduled after a
    busy engine failed it: back into rotation when it passes, out of it when it fails."""
    attempt = context.live.of(instance_id).verification_failures + 1
    if not asked_by_user:
        await context.transition(
            instance_id,
            Reverifying(reason=f"verifying again (attempt {attempt}); out of rotation until it passes"),
        )
    results = await _judge(
        context, deployment, instance_id, engine, version, occasion="request" if asked_by_user else "retry"
    )
    if results is None:
        return
    _enter_rotation(context, deployment, instance_id)
    checks = _passed_count(results)
    reason = (
        f"verification run again on request: {checks} check(s) passed; in rotation"
        if asked_by_user
        else f"verification passed on attempt {attempt} ({checks} check(s)); in rotation"
    )
    now = context.clock.now()
    # Scheduled after a busy engine failed it, it takes traffic from now on.
    passed = Reverified(
        reason=reason, verification=results, verified_at=now, ready_at=None if asked_by_user else now
    )
    await context.transition(instance_id, passed)
    if not asked_by_user:  # the start reaches running only now: its KV cache is checked now
        await check_start(context, deployment, instance_id, engine, version.version)
    context.poke()
