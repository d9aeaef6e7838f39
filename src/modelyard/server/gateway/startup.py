"""Starting the gateway with the server, in its lifespan.

With gateway workers (``context.gateway_workers``: one public-port socket per worker, made by
``serving.py`` before the server starts), the main process starts the worker supervisor; with
none, the gateway's parts run in the main process and ``GatewayApp`` serves ``/v1`` there.

Usage (``server/app.py``)::

    gateway = await start_gateway(context)   # sets context.gateway and context.key_cache
    ...                                      # the controller starts its engines
    await gateway.serving()                  # the workers serve /v1
    ...
    await gateway.close()                    # writes pending usage rows; stops the workers
"""

from __future__ import annotations

import asyncio
import os

from modelyard.control.endpoints import ROUTING_POLICIES, DeploymentLimits
from modelyard.server.autoscale_wiring import wake_autoscaler
from modelyard.server.context import GatewayHandle, ServerContext
from modelyard.server.gateway.runtime import (
    GatewayRuntime,
    GatewaySettings,
    journal_directory,
    start_in_process_gateway,
)
from modelyard.server.gateway.usage import replay_journal
from modelyard.server.gateway.usage_journal import UsageJournal
from modelyard.server.metrics.route import ensure_metrics_token
from modelyard.services.deployment_limits import all_deployment_limits
from modelyard.services.deployments import routing_policies


async def start_gateway(context: ServerContext, settings: GatewaySettings | None = None) -> GatewayHandle:
    """Start the gateway (call inside the running event loop)."""
    settings = settings or GatewaySettings.from_environment(os.environ)
    ensure_metrics_token(context.settings)
    await _load_routing_policies(context)
    # Usage rows journaled by an earlier run (killed before it wrote them) go in first, before
    # anything serves; ON CONFLICT on request_id skips those that were written.
    journal = journal_directory(context.settings)
    await asyncio.to_thread(replay_journal, context.database, journal)
    handle: GatewayHandle
    if context.gateway_workers is not None:
        from modelyard.server.gateway.supervisor import WorkerSupervisor

        supervisor = WorkerSupervisor(context, settings)
        await supervisor.start()
        context.key_cache = supervisor
        handle = supervisor
    else:
        in_process = start_in_process_gateway(
            context.endpoints,
            context.database,
            settings,
            on_refused=lambda endpoint: context.controller.poke(),
            limits=context.limits,
            key_throttle=context.key_throttle,
            journal=UsageJournal.open(journal),
            on_wanted=lambda name: wake_autoscaler(context, name),
        )
        context.key_cache = in_process.runtime.key_cache
        handle = in_process
    context.gateway = handle
    return handle


async def _load_routing_policies(context: ServerContext) -> None:
    """Each deployment's routing policy and limits, from the store (the API sets them on changes)."""

    def read() -> tuple[dict[str, str], dict[str, DeploymentLimits]]:
        with context.database.session() as session:
            return routing_policies(session), all_deployment_limits(session)

    policies, limits = await asyncio.to_thread(read)
    for name, policy in policies.items():
        if policy in ROUTING_POLICIES:
            context.endpoints.set_routing(name, policy)
    for name, deployment_limits in limits.items():
        context.endpoints.set_limits(name, deployment_limits)


def in_process_runtime(context: ServerContext) -> GatewayRuntime | None:
    """For ``GatewayApp``: the runtime when ``/v1`` is served in this process, else None."""
    gateway = context.gateway
    return gateway.in_process_runtime() if gateway is not None else None
