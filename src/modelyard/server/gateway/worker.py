"""A gateway worker process: ``/v1`` on one of the public port's sockets, the rest relayed.

Started by the main process (``supervisor.py``), never by hand::

    python -m modelyard.server.gateway.worker --index 0 --listen-fd 5 --control-fd 6

It reads its ``WorkerHello`` from the control channel, opens the database (API keys; no
migrations, the main process ran them), attaches the shared counters, and serves with uvicorn
(uvloop, httptools) until the main process says ``Drain``, closes the channel, or dies (the
worker asks Linux to send it SIGTERM when its parent goes). Usage rows leave in batches (every
``worker_usage.py``; each row journaled first), metrics every ``METRICS_INTERVAL_S``.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import logging
import multiprocessing
import os
import signal
import socket
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import uvicorn
import uvloop
from starlette.types import ASGIApp

from modelyard.control.endpoints import Endpoint, EndpointRegistry, RegistrySnapshot
from modelyard.server.access_log import AccessLog, enable_access_log
from modelyard.server.door.body_limit import BodyLimitMiddleware
from modelyard.server.door.http_protocol import bounded_http_protocol
from modelyard.server.door.limits import RequestLimits
from modelyard.server.gateway.app import GatewayApp
from modelyard.server.gateway.main_relay import MainRelay
from modelyard.server.gateway.messages import (
    Channel,
    Drain,
    EndpointsChanged,
    KeysChanged,
    MetricsSnapshot,
    QuotaUsage,
    ReplicaRefused,
    ReplicaWanted,
    UsageCommitted,
    WorkerHello,
    WorkerReady,
)
from modelyard.server.gateway.runtime import GatewaySettings, start_gateway_runtime
from modelyard.server.gateway.shared_counters import SharedCounters
from modelyard.server.gateway.usage_journal import UsageJournal
from modelyard.server.gateway.worker_usage import WorkerUsage
from modelyard.server.metrics.gateway_counts import GatewayCounts
from modelyard.server.throttle import FailureThrottle
from modelyard.server.throttle_table import ThrottleTable
from modelyard.store.database import Database

logger = logging.getLogger(__name__)

METRICS_INTERVAL_S = 1.0
GRACEFUL_SHUTDOWN_S = 10
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Ask Linux for SIGTERM when the main process goes, however it goes."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _tune_garbage_collection(settings: GatewaySettings, counts: GatewayCounts) -> None:
    """Freeze what start-up made, collect young objects less often, and time every pause."""
    gc.collect()
    if settings.gc_freeze:
        gc.freeze()
        gc.set_threshold(settings.gc_young_threshold, *settings.gc_old_thresholds)
    started = [0.0]

    def on_collection(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            counts.gc_pauses.observe(time.perf_counter() - started[0])

    gc.callbacks.append(on_collection)


async def serve(index: int, listen_fd: int, control_fd: int) -> None:
    channel = await Channel.open(socket.socket(fileno=control_fd))
    hello = await channel.receive()
    if not isinstance(hello, WorkerHello):
        raise SystemExit(f"gateway worker {index}: the first message was {hello!r}, not a WorkerHello")
    settings = GatewaySettings.from_json(hello.settings)
    limits = RequestLimits(**hello.limits)
    database = Database.open(hello.database_url, migrate=False)
    counters = SharedCounters.attach(hello.shared_counters_name, workers=hello.workers, row=index)
    key_throttle_table = ThrottleTable.attach(hello.key_throttle_name, Path(hello.key_throttle_lock_path))
    registry = EndpointRegistry()
    registry.load(RegistrySnapshot.from_json(hello.endpoints))
    usage = WorkerUsage(channel, UsageJournal.open(Path(hello.journal_directory)))

    def on_refused(endpoint: Endpoint) -> None:
        channel.send(ReplicaRefused(endpoint.deployment_name, endpoint.instance_id))

    def on_wanted(deployment_name: str) -> None:
        channel.send(ReplicaWanted(deployment_name))

    runtime = start_gateway_runtime(
        settings=settings,
        registry=registry,
        database=database,
        usage=usage,
        shared=counters,
        on_refused=on_refused,
        on_wanted=on_wanted,
        limits=limits,
        key_throttle=FailureThrottle(what="API key", table=key_throttle_table),
        process_label=f"gateway worker {index}",
    )
    # The quotas count this worker's rows until the main process acknowledges them (limits.py).
    runtime.limiter.last_usage_sequence = lambda: usage.journal.last_sequence
    relay = MainRelay(hello.api_socket_path)
    # The door's bounds hold here as in the main process: heads in the parser, bodies per route
    # (before a body is relayed), JSON nesting on /v1.
    app: ASGIApp = GatewayApp(lambda: runtime, fallback=BodyLimitMiddleware(relay, limits), limits=limits)
    if hello.access_log:
        # A line per /v1 answer; the main process logs what is relayed to it (access_log.py).
        enable_access_log()
        app = AccessLog(app, prefix="/v1/")
    config = uvicorn.Config(
        app,
        lifespan="off",
        http=bounded_http_protocol(limits),
        log_level=logging.getLogger().getEffectiveLevel(),
        access_log=False,  # uvicorn's: the gateway writes /v1 answers itself (access_log.py)
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        server_header=False,
        # As uvicorn does by default: X-Forwarded-For is taken from a proxy on this host (nginx in
        # front) and from nobody else; the client address found is what throttling counts and
        # what the relay tells the main process.
        proxy_headers=True,
    )
    server = uvicorn.Server(config)

    async def listen_to_main() -> None:
        while (message := await channel.receive()) is not None:
            if isinstance(message, EndpointsChanged):
                registry.load(RegistrySnapshot.from_json(message.endpoints))
            elif isinstance(message, KeysChanged):
                runtime.key_cache.invalidate()
            elif isinstance(message, UsageCommitted):
                usage.committed(message.through_sequence)
                runtime.limiter.quota_committed(message.through_sequence)
            elif isinstance(message, QuotaUsage):
                for key_id, period_start_s, used_tokens in message.used:
                    start = datetime.fromtimestamp(period_start_s, UTC)
                    runtime.limiter.quota_recorded(key_id, start, used_tokens)
            elif isinstance(message, Drain):
                break
        server.should_exit = True  # drained, or the main process is gone

    async def send_metrics() -> None:
        while True:
            await asyncio.sleep(METRICS_INTERVAL_S)
            channel.send(snapshot())

    def snapshot() -> MetricsSnapshot:
        counts = runtime.counts.snapshot()
        return MetricsSnapshot(index=index, counts=counts, journal_failure=usage.journal.failure)

    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(listen_to_main()), loop.create_task(send_metrics())]
    listen_socket = socket.socket(fileno=listen_fd)
    _tune_garbage_collection(settings, runtime.counts)
    channel.send(WorkerReady(index=index, pid=os.getpid()))
    try:
        await server.serve(sockets=[listen_socket])
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await usage.close()
        channel.send(snapshot())
        await channel.drain()
        await relay.close()
        await runtime.close()
        counters.close()
        key_throttle_table.close()
        database.close()
        channel.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="A modelyard gateway worker (started by `modelyard serve`).")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--listen-fd", type=int, required=True)
    parser.add_argument("--control-fd", type=int, required=True)
    arguments = parser.parse_args()
    _die_with_parent()
    multiprocessing.current_process().name = f"gateway-worker-{arguments.index}"
    logging.basicConfig(
        level=logging.WARNING,
        format="%(asctime)s %(processName)s[%(process)d] %(levelname)s %(name)s: %(message)s",
    )
    uvloop.run(serve(arguments.index, arguments.listen_fd, arguments.control_fd))


if __name__ == "__main__":
    main()
