"""The gateway's long-lived parts, created once at server start and closed at shutdown.

The server's app factory wires them in::

    app.include_router(gateway_router)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        gateway = await start_gateway(context, app)   # sets context.key_cache, app.state.gateway
        try:
            yield
        finally:
            await gateway.close()                     # flushes usage rows and last_used_at
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx
from fastapi import FastAPI, Request

from modelyard.server.context import ServerContext
from modelyard.server.gateway.keys import KeyCache
from modelyard.server.gateway.routing import ReplicaBalancer
from modelyard.server.gateway.usage import UsageRecorder

_CONTEXT_ATTRIBUTE = "gateway"


@dataclass(frozen=True)
class GatewaySettings:
    """How the gateway talks to engines and how long it trusts what it caches."""

    # Connecting to an engine on this host: a refused or slow connect moves on to another replica.
    connect_timeout_s: float = 5.0
    # Longest silence between two pieces of an engine's answer (a long non-streamed answer, or a
    # reasoning model thinking before its first token, can take many minutes).
    read_timeout_s: float = 1800.0
    write_timeout_s: float = 120.0
    # Waiting for a free connection when all max_connections are busy.
    pool_timeout_s: float = 120.0
    max_connections: int = 8192
    max_keepalive_connections: int = 2048
    keepalive_expiry_s: float = 60.0
    # How long a known / unknown API key is trusted without asking the database.
    key_known_ttl_s: float = 30.0
    key_unknown_ttl_s: float = 5.0
    # How often last_used_at of API keys is written.
    key_last_used_interval_s: float = 60.0
    # How long the usage writer waits after a row for others to share its transaction.
    usage_batch_delay_s: float = 0.25


def create_engine_client(settings: GatewaySettings) -> httpx.AsyncClient:
    """The one HTTP client to every engine: big pool, generous read timeout, no proxies from env."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(
            connect=settings.connect_timeout_s,
            read=settings.read_timeout_s,
            write=settings.write_timeout_s,
            pool=settings.pool_timeout_s,
        ),
        limits=httpx.Limits(
            max_connections=settings.max_connections,
            max_keepalive_connections=settings.max_keepalive_connections,
            keepalive_expiry=settings.keepalive_expiry_s,
        ),
        # Engines listen on this host; an HTTP(S)_PROXY in the environment must not apply.
        trust_env=False,
        follow_redirects=False,
    )


@dataclass
class GatewayRuntime:
    context: ServerContext
    settings: GatewaySettings
    engine_client: httpx.AsyncClient
    key_cache: KeyCache
    usage: UsageRecorder
    balancer: ReplicaBalancer = field(default_factory=ReplicaBalancer)

    async def close(self) -> None:
        """Write pending usage rows and key times, then close connections to engines."""
        await self.usage.close()
        await self.key_cache.close()
        await self.engine_client.aclose()


async def start_gateway(
    context: ServerContext, app: FastAPI | None = None, settings: GatewaySettings | None = None
) -> GatewayRuntime:
    """Create the gateway's parts inside the running event loop and attach them.

    Sets ``context.key_cache`` (invalidated by the REST API when keys change) and makes the
    runtime reachable by the routes (``gateway_runtime``): on ``context`` and, when given, on
    ``app.state.gateway``.
    """
    settings = settings or GatewaySettings()
    key_cache = KeyCache(
        context.database,
        known_ttl_s=settings.key_known_ttl_s,
        unknown_ttl_s=settings.key_unknown_ttl_s,
        last_used_interval_s=settings.key_last_used_interval_s,
    )
    usage = UsageRecorder(context.database, batch_delay_s=settings.usage_batch_delay_s)
    runtime = GatewayRuntime(
        context=context,
        settings=settings,
        engine_client=create_engine_client(settings),
        key_cache=key_cache,
        usage=usage,
    )
    key_cache.start()
    usage.start()
    context.key_cache = key_cache
    # ServerContext has no typed slot for the gateway yet; the routes read this attribute.
    setattr(context, _CONTEXT_ATTRIBUTE, runtime)
    if app is not None:
        app.state.gateway = runtime
    return runtime


def gateway_runtime(request: Request) -> GatewayRuntime:
    """The running gateway of the app that received ``request``."""
    state = request.app.state
    runtime = getattr(state, "gateway", None)
    if runtime is None:
        runtime = getattr(getattr(state, "context", None), _CONTEXT_ATTRIBUTE, None)
    if not isinstance(runtime, GatewayRuntime):
        raise RuntimeError(
            "the gateway is not started: call start_gateway(context, app) in the app's lifespan"
        )
    return runtime
