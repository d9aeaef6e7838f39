"""``GET /metrics``: everything in Prometheus's text format, behind a scrape token.

The token is made at the server's first start in ``<data-dir>/metrics-token`` (0600); send it as
``Authorization: Bearer <token>`` (Prometheus: ``authorization: {credentials_file: ...}``).
It keeps key and deployment names off an open port without handing Prometheus admin rights.

One scrape: the gateway's counts (summed over the workers), the controller's instances (one
read of the store), the GPUs of this host (the controller's last NVML reading) or, on a cluster,
of every worker (``worker``: the worker's name), and every ready engine's own metrics, read at
once (``engine_scrape.py``).
"""

from __future__ import annotations

import asyncio
import hmac
import os
import secrets
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from modelyard.control.booking_check import latest_measurements
from modelyard.control.start_observations import latest_shortfalls
from modelyard.server.context import ServerContext, server_context
from modelyard.server.gateway.hold import HELD_TABLE
from modelyard.server.metrics.autoscale_families import autoscale_families, read_autoscale
from modelyard.server.metrics.engine_scrape import scrape_engines
from modelyard.server.metrics.families import (
    PREFIX,
    WorkerGpus,
    booking_families,
    controller_families,
    gateway_families,
    gpu_families,
    memory_booking_families,
    read_instances,
)
from modelyard.server.metrics.gateway_counts import GatewayCounts
from modelyard.settings import METRICS_TOKEN_FILE_NAME, Settings

metrics_router = APIRouter(tags=["metrics"])

ENGINE_SCRAPE_TIMEOUT_S = 2.0


def metrics_token_path(settings: Settings) -> Path:
    return settings.data_dir / METRICS_TOKEN_FILE_NAME


def ensure_metrics_token(settings: Settings) -> str:
    """The scrape token, made (0600) when the data directory has none."""
    path = metrics_token_path(settings)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_urlsafe(32) + "\n")
    return path.read_text().strip()


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families


def worker_gpus(context: ServerContext) -> list[WorkerGpus]:
    """This host's GPUs under its host name; on a cluster, each worker's under the worker's name,
    as last read there (NVML unread: a lost worker, or the probe's problem)."""
    cluster = context.cluster
    if cluster is None:
        inventory = context.controller.gpu_inventory()
        return [WorkerGpus(socket.gethostname(), inventory.available, inventory.gpus)]
    return [
        WorkerGpus(
            status.worker.name,
            status.state == "ready" and status.probe_problem is None,
            status.worker.gpus,
        )
        for status in cluster.statuses()
    ]


def throttle_family(context: ServerContext) -> Metric:
    """Credential checks from other hosts that the throttles let run or refused (server/throttle.py);
    the API-key throttle's counts are those of every gateway worker together."""
    family = CounterMetricFamily(
        f"{PREFIX}_auth_throttle_attempts",
        "Credential checks from other hosts (loopback is never throttled): admitted to their check "
        "(a scrypt run or an API key read), or refused with 429 while the address waits.",
        labels=["throttle", "outcome"],
    )
    for name, throttle in (("login", context.login_throttle), ("api_key", context.key_throttle)):
        admitted, refused = throttle.counts()
        family.add_metric([name, "admitted"], admitted)
        family.add_metric([name, "refused"], refused)
    return family


def held_requests_reader(context: ServerContext) -> Callable[[int], int] | None:
    """Requests held now for a deployment scaled to zero, by its id, summed over the gateway
    workers (``server/gateway/hold.py``); None without a gateway."""
    gateway = context.gateway
    if gateway is None:
        return None
    table = gateway.shared_counters().table(HELD_TABLE)
    return lambda deployment_id: table.total(deployment_id % table.columns)


def _unauthorized(message: str) -> Response:
    body = f'{{"error": {{"message": "{message}", "code": "invalid_scrape_token"}}}}'
    return Response(
        body, status_code=401, media_type="application/json", headers={"WWW-Authenticate": "Bearer"}
    )


@metrics_router.get("/metrics", include_in_schema=False)
async def metrics(request: Request, context: ServerContext = Depends(server_context)) -> Response:
    expected = ensure_metrics_token(context.settings)
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected.encode()):
        return _unauthorized(
            f"send the scrape token of {metrics_token_path(context.settings)} as a Bearer token"
        )
    gateway = context.gateway
    counts = gateway.gateway_counts() if gateway is not None else GatewayCounts()
    workers = gateway.requests_by_worker() if gateway is not None else {}
    instances, shortfalls, measurements, autoscale, engines = await asyncio.gather(
        asyncio.to_thread(read_instances, context.database),
        asyncio.to_thread(latest_shortfalls, context.database),
        asyncio.to_thread(latest_measurements, context.database),
        asyncio.to_thread(read_autoscale, context.database),
        scrape_engines(context.endpoints.all_endpoints(), timeout_s=ENGINE_SCRAPE_TIMEOUT_S),
    )
    worker_count = GaugeMetricFamily(
        f"{PREFIX}_gateway_workers", "Gateway worker processes (0: /v1 in the main process)."
    )
    worker_count.add_metric([], len(workers) if context.gateway_workers is not None else 0)
    families = [
        worker_count,
        throttle_family(context),
        *gateway_families(counts, workers),
        *controller_families(instances),
        *booking_families(shortfalls),
        *memory_booking_families(measurements),
        *autoscale_families(autoscale, held_requests_reader(context)),
        *gpu_families(worker_gpus(context)),
        *engines,
    ]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
