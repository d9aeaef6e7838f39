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

import asyncio
from dataclasses import dataclass, field
from functools import partial

import aiohttp
from fastapi import FastAPI, Request

from modelyard.server.context import ServerContext
from modelyard.server.gateway.keys import KeyCache
from modelyard.server.gateway.limits import InProcessCounters, KeyLimiter
from modelyard.server.gateway.routing import ReplicaBalancer
from modelyard.server.gateway.usage import UsageRecorder, replay_journal, tokens_used_since
from modelyard.server.gateway.usage_journal import UsageJournal

USAGE_JOURNAL_FOLDER = "usage-journal"

# Anything that can go wrong between the gateway and an engine once a request is on its way.
ENGINE_CONNECTION_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)


@dataclass(frozen=True)
class GatewaySettings:
    """How the gateway talks to engines and how long it trusts what it caches."""

    # Connecting to an engine on this host: a refused or slow connect moves on to another replica.
    connect_timeout_s: float = 5.0
    # Longest silence between two pieces of an engine's answer (a long non-streamed answer, or a
    # reasoning model thinking before its first token, can take many minutes).
    read_timeout_s: float = 1800.0
    # Open connections to all engines together; requests beyond it wait for a free one.
    max_connections: int = 8192
    # How long an idle connection to an engine is kept for reuse. Below the engines' own idle
    # limit (uvicorn's default, used by vLLM and SGLang, is 5 s) so that the gateway never
    # sends a request on a connection the engine is closing.
    keepalive_expiry_s: float = 4.0
    # How long a known / unknown API key is trusted without asking the database.
    key_known_ttl_s: float = 30.0
    key_unknown_ttl_s: float = 5.0
    # How often last_used_at of API keys is written.
    key_last_used_interval_s: float = 60.0
    # How long the usage writer waits after a row for others to share its transaction.
    usage_batch_delay_s: float = 0.25


def create_engine_client(settings: GatewaySettings) -> aiohttp.ClientSession:
    """The one HTTP client to every engine (call inside the running event loop).

    aiohttp rather than httpx: relaying a stream costs about a fifth of the CPU per event
    (C HTTP parser, O(1) connection pool), which is what lets one gateway process keep up with
    hundreds of concurrent streams. No proxy from the environment: engines are on this host.
    """
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(
            limit=settings.max_connections,
            limit_per_host=0,
            keepalive_timeout=settings.keepalive_expiry_s,
        ),
        timeout=aiohttp.ClientTimeout(
            total=None, sock_connect=settings.connect_timeout_s, sock_read=settings.read_timeout_s
        ),
        auto_decompress=False,
        trust_env=False,
    )


@dataclass
class GatewayRuntime:
    context: ServerContext
    settings: GatewaySettings
    engine_client: aiohttp.ClientSession
    key_cache: KeyCache
    usage: UsageRecorder
    balancer: ReplicaBalancer = field(default_factory=ReplicaBalancer)
    # The keys' limits (limits.py), in this process; made from the context's database.
    limiter: KeyLimiter = field(init=False)

    def __post_init__(self) -> None:
        self.limiter = KeyLimiter(InProcessCounters(), partial(tokens_used_since, self.context.database))

    async def close(self) -> None:
        """Write pending usage rows and key times, then close connections to engines."""
        await self.usage.close()
        await self.key_cache.close()
        await self.engine_client.close()


async def start_gateway(
    context: ServerContext, app: FastAPI, settings: GatewaySettings | None = None
) -> GatewayRuntime:
    """Create the gateway's parts inside the running event loop and attach them.

    Sets ``context.key_cache`` (invalidated by the REST API when keys change) and makes the
    runtime reachable by the routes (``gateway_runtime``) as ``app.state.gateway``.
    """
    settings = settings or GatewaySettings()
    key_cache = KeyCache(
        context.database,
        known_ttl_s=settings.key_known_ttl_s,
        unknown_ttl_s=settings.key_unknown_ttl_s,
        last_used_interval_s=settings.key_last_used_interval_s,
    )
    # Rows journaled by an earlier process (killed before it wrote them) go in first.
    journal_directory = context.settings.data_dir / USAGE_JOURNAL_FOLDER
    await asyncio.to_thread(replay_journal, context.database, journal_directory)
    usage = UsageRecorder(
        context.database,
        journal=UsageJournal.open(journal_directory),
        batch_delay_s=settings.usage_batch_delay_s,
    )
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
    app.state.gateway = runtime
    return runtime


def gateway_runtime(request: Request) -> GatewayRuntime:
    """The running gateway of the app that received ``request``."""
    runtime = getattr(request.app.state, "gateway", None)
    if not isinstance(runtime, GatewayRuntime):
        raise RuntimeError(
            "the gateway is not started: call start_gateway(context, app) in the app's lifespan"
        )
    return runtime
