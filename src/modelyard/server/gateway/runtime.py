"""The gateway's long-lived parts in one process, created at start and closed at shutdown.

A ``GatewayRuntime`` is what the fast path (``app.py``) reads on every request. It is assembled
by ``start_gateway_runtime`` alone, called from one of two places:

- in a gateway worker process (``worker.py``): the registry is a copy pushed by the main
  process, usage rows and refused-replica hints go back over the control channel, the
  outstanding-request counts live in shared memory;
- in the main process with ``--gateway-workers 0`` (``start_in_process_gateway``): the
  controller's own registry, the usage recorder, private counters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from modelyard.control.endpoints import Endpoint, EndpointRegistry
from modelyard.errors import InvalidInput
from modelyard.http_client import Http1Client
from modelyard.server.door.limits import RequestLimits
from modelyard.server.gateway.hold import RegistryChanges
from modelyard.server.gateway.keys import KeyCache
from modelyard.server.gateway.limit_counters import SlidingCounters
from modelyard.server.gateway.limits import Limiter
from modelyard.server.gateway.project_limits import ProjectLimiter, project_tokens_since
from modelyard.server.gateway.routing import ReplicaBalancer
from modelyard.server.gateway.shared_counters import SharedCounters
from modelyard.server.gateway.usage import UsageRecorder, UsageRow, tokens_used_since
from modelyard.server.gateway.usage_journal import UsageJournal
from modelyard.server.metrics.gateway_counts import GatewayCounts
from modelyard.server.throttle import FailureThrottle
from modelyard.settings import Settings
from modelyard.store.database import Database

GC_VARIABLE = "MODELYARD_GATEWAY_GC"


@dataclass(frozen=True)
class GatewaySettings:
    """How the gateway talks to engines, how long it trusts what it caches, how it routes."""

    # Connecting to an engine on this host: a refused or slow connect moves on to another replica.
    connect_timeout_s: float = 5.0
    # Longest silence from an engine while it answers (a long non-streamed answer, or a
    # reasoning model thinking before its first token, can take many minutes).
    read_timeout_s: float = 1800.0
    # How long an idle connection to an engine is kept for reuse. Below the engines' own idle
    # limit (uvicorn's default, used by vLLM and SGLang, is 5 s) so that the gateway never
    # sends a request on a connection the engine is closing.
    keepalive_expiry_s: float = 4.0
    # How long a known / unknown API key is trusted without asking the database (a key changed
    # through the REST API is dropped from every worker's cache at once).
    key_known_ttl_s: float = 30.0
    key_unknown_ttl_s: float = 5.0
    # How often last_used_at of API keys is written.
    key_last_used_interval_s: float = 60.0
    # How long the usage writer waits after a row for others to share its transaction.
    usage_batch_delay_s: float = 0.25
    # Prefix-aware routing: the characters of the prompt that are hashed (about 4 per token of
    # English), and how much busier than the average the prefix's replica may be before the
    # request goes to the least busy one instead.
    prefix_characters: int = 1024
    prefix_load_factor: float = 1.25
    # Garbage collection in a worker: freeze what start-up made (a full collection then scans only
    # what serving made), a young generation of this many allocations, and full collections 20 x
    # 20 young ones apart (CPython's default: 700, 10, 10). Measured by benchmarks/gateway_overhead.py
    # --gc-compare: a young threshold of 50,000 made each collection a 100-250 ms pause.
    gc_freeze: bool = True
    gc_young_threshold: int = 1000
    gc_old_thresholds: tuple[int, int] = (20, 20)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> GatewaySettings:
        """The defaults, with ``MODELYARD_GATEWAY_GC=default`` turning the workers' GC tuning off
        (``tuned``, the default, freezes start-up objects and collects young ones less often)."""
        mode = environ.get(GC_VARIABLE, "tuned").strip() or "tuned"
        if mode not in ("tuned", "default"):
            raise InvalidInput(
                f"{GC_VARIABLE}={mode!r} is not 'tuned' or 'default'", hint="unset it for 'tuned'"
            )
        return cls(gc_freeze=mode == "tuned")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GatewaySettings:
        known = {item.name for item in dataclasses.fields(cls)}
        return cls(**{name: value for name, value in data.items() if name in known})


class UsageSink(Protocol):
    """Where finished requests go: the usage writer, or the batch to the main process."""

    def record(self, row: UsageRow) -> None: ...


@dataclass
class GatewayRuntime:
    settings: GatewaySettings
    registry: EndpointRegistry
    database: Database
    engine_client: Http1Client
    key_cache: KeyCache
    usage: UsageSink
    balancer: ReplicaBalancer
    counts: GatewayCounts = field(default_factory=GatewayCounts)
    # A replica refused a connection: the controller should look at it now.
    on_refused: Callable[[Endpoint], None] = lambda endpoint: None
    # A request is held for a deployment scaled to zero: the autoscaler should start a replica.
    on_wanted: Callable[[str], None] = lambda deployment_name: None
    # "worker 2" or "main": named in log lines.
    process_label: str = "main"
    # What one request may weigh (server/door/): the JSON nesting is checked here.
    limits: RequestLimits = field(default_factory=RequestLimits)
    # Wrong API keys per client address (server/throttle.py); in a worker, on the table that
    # every worker shares.
    key_throttle: FailureThrottle = field(default_factory=lambda: FailureThrottle(what="API key"))
    # The counters every worker sees (shared_counters.py); private with --gateway-workers 0.
    shared: SharedCounters = field(default_factory=SharedCounters.private)
    # The keys' and deployments' limits (limits.py) on the shared counters; quotas read from the database.
    limiter: Limiter = field(init=False)
    # Wakes the requests held for a deployment with no ready replica on every registry change.
    registry_changes: RegistryChanges = field(init=False)
    # The projects' quotas (project_limits.py), checked before the key's limits.
    project_limiter: ProjectLimiter = field(init=False)

    def __post_init__(self) -> None:
        self.registry_changes = RegistryChanges(self.registry)
        self.limiter = Limiter(
            SlidingCounters.for_keys(self.shared),
            SlidingCounters.for_deployments(self.shared),
            partial(tokens_used_since, self.database),
        )
        self.project_limiter = ProjectLimiter(
            SlidingCounters.for_projects(self.shared), partial(project_tokens_since, self.database)
        )

    async def close(self) -> None:
        """Close connections to engines and write what the caches hold."""
        await self.key_cache.close()
        await self.engine_client.close()


USAGE_JOURNAL_FOLDER = "usage-journal"


def journal_directory(settings: Settings) -> Path:
    """Where every gateway process journals its usage rows (``usage_journal.py``)."""
    return settings.data_dir / USAGE_JOURNAL_FOLDER


def start_gateway_runtime(
    *,
    settings: GatewaySettings,
    registry: EndpointRegistry,
    database: Database,
    usage: UsageSink,
    shared: SharedCounters,
    on_refused: Callable[[Endpoint], None],
    limits: RequestLimits,
    key_throttle: FailureThrottle,
    process_label: str = "main",
    on_wanted: Callable[[str], None] = lambda deployment_name: None,
) -> GatewayRuntime:
    """The gateway's parts over ``registry`` and ``shared``, with its engine client and key cache
    made from ``settings`` and started (call inside the running event loop). The one place a
    ``GatewayRuntime`` is assembled: a gateway worker (``worker.py``) and the main process with
    ``--gateway-workers 0`` (``start_in_process_gateway``) differ only in what they pass."""
    runtime = GatewayRuntime(
        settings=settings,
        registry=registry,
        database=database,
        engine_client=Http1Client(
            connect_timeout_s=settings.connect_timeout_s,
            read_timeout_s=settings.read_timeout_s,
            keepalive_expiry_s=settings.keepalive_expiry_s,
            peer="engine",
        ),
        key_cache=KeyCache(
            database,
            known_ttl_s=settings.key_known_ttl_s,
            unknown_ttl_s=settings.key_unknown_ttl_s,
            last_used_interval_s=settings.key_last_used_interval_s,
        ),
        usage=usage,
        balancer=ReplicaBalancer(shared.table("endpoint_requests")),
        shared=shared,
        on_refused=on_refused,
        on_wanted=on_wanted,
        process_label=process_label,
        limits=limits,
        key_throttle=key_throttle,
    )
    runtime.engine_client.start()
    runtime.key_cache.start()
    return runtime


@dataclass
class InProcessGateway:
    """The gateway inside the main process (``--gateway-workers 0``) and what closes it."""

    runtime: GatewayRuntime
    recorder: UsageRecorder

    def in_process_runtime(self) -> GatewayRuntime | None:
        return self.runtime

    def usage_failure(self) -> str | None:
        return self.recorder.failure

    def gateway_counts(self) -> GatewayCounts:
        return self.runtime.counts

    def requests_by_worker(self) -> dict[str, int]:
        return {}

    async def serving(self) -> None:
        """``/v1`` is served by this process's app: nothing to wait for."""

    def shared_counters(self) -> SharedCounters:
        return self.runtime.shared

    async def close(self) -> None:
        await self.recorder.close()
        await self.runtime.close()


def start_in_process_gateway(
    registry: EndpointRegistry,
    database: Database,
    settings: GatewaySettings,
    on_refused: Callable[[Endpoint], None],
    limits: RequestLimits | None = None,
    key_throttle: FailureThrottle | None = None,
    journal: UsageJournal | None = None,
    on_wanted: Callable[[str], None] = lambda deployment_name: None,
) -> InProcessGateway:
    """The gateway's parts on the controller's registry (call inside the running event loop);
    ``journal``: where each usage row goes before the answer's last bytes (usage_journal.py)."""
    recorder = UsageRecorder(database, journal=journal, batch_delay_s=settings.usage_batch_delay_s)
    runtime = start_gateway_runtime(
        settings=settings,
        registry=registry,
        database=database,
        usage=recorder,
        shared=SharedCounters.private(),
        on_refused=on_refused,
        on_wanted=on_wanted,
        limits=limits or RequestLimits(),
        key_throttle=key_throttle or FailureThrottle(what="API key"),
    )
    recorder.start()
    return InProcessGateway(runtime=runtime, recorder=recorder)
