"""What the server's parts share while it runs, held on ``app.state.context``.

Routers reach it with ``request.app.state.context`` (see ``server_context``). Everything lives in
the server's one event loop.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from fastapi import Request

from modelyard.control.endpoints import EndpointRegistry
from modelyard.demo.status import DemoStatus
from modelyard.downloads.options import DownloadOptions
from modelyard.runtimes.selection import RuntimeSet
from modelyard.server.door.limits import RequestLimits
from modelyard.server.throttle import FailureThrottle
from modelyard.settings import Settings
from modelyard.store.database import Database
from modelyard.store.secret_box import SecretBox

if TYPE_CHECKING:
    from modelyard.cluster.workers import WorkerStatus
    from modelyard.control.scheduler import Worker
    from modelyard.hardware.gpus import GpuInventory
    from modelyard.server.api.autoscale import AutoscaleStatusSource
    from modelyard.server.gateway.runtime import GatewayRuntime
    from modelyard.server.gateway.shared_counters import SharedCounters
    from modelyard.server.metrics.gateway_counts import GatewayCounts


class ControllerHandle(Protocol):
    """What the API needs of the controller (``modelyard.control.controller.Controller``)."""

    def poke(self) -> None:
        """Desired state changed: reconcile now instead of at the next tick."""

    def gpu_inventory(self) -> GpuInventory:
        """The GPUs of this host as last read (refreshed every few seconds)."""

    def workers(self) -> list[Worker]:
        """The workers as last read, with their GPUs (one, ``local``, on a single host): where the
        deploy-time check asks the scheduler to place one replica."""


class ClusterHandle(Protocol):
    """What the server needs of its cluster (``modelyard.cluster.server_cluster.ServerCluster``)."""

    address: str

    def workers(self) -> list[Worker]:
        """Every worker now, blocking (the controller's source of workers, called in a thread)."""

    def statuses(self) -> list[WorkerStatus]:
        """The workers as last read: state, labels, last seen (``GET /api/v1/workers``)."""

    def model_directory_problems(self, model_path: str) -> tuple[list[str], dict[str, str]]:
        """The ready GPU workers, and what is wrong with ``model_path`` on each that cannot serve
        it (a Ray task on each; blocking: call it in a thread)."""

    def node_id_of(self, worker: str) -> str | None:
        """The Ray node id of the ready worker named ``worker`` (None: none is ready by that name)."""

    def run_on(self, worker: str, function: Any, *arguments: Any) -> Any:
        """``function(*arguments)`` as a Ray task on ``worker``, blocking; ``LookupError`` when
        it is not ready, ``TimeoutError`` when it does not answer."""


class ModelSurveyHandle(Protocol):
    """What the API needs of the survey of models on workers (``server/model_survey.py``)."""

    def poke(self) -> None:
        """Look at every worker's models again now."""


class DownloadsHandle(Protocol):
    """What the API needs of the download manager (``modelyard.downloads.DownloadManager``)."""

    options: DownloadOptions

    def poke(self) -> None:
        """A task was created or resumed: start it now."""

    def cancel(self, task_id: int) -> None:
        """Stop a running task at its next chunk (the API has set ``cancel_requested``)."""

    def live(self, task_id: int) -> dict[str, Any] | None:
        """Rates and time left of a task running in this process."""


class KeyCacheHandle(Protocol):
    """What the API needs of the gateway's key cache: drop it after a key is created or revoked."""

    def invalidate(self) -> None: ...


class GatewayHandle(Protocol):
    """What the server holds of the running gateway (``modelyard.server.gateway.startup``)."""

    def in_process_runtime(self) -> GatewayRuntime | None:
        """The gateway's parts when ``/v1`` is served in this process (no gateway workers)."""

    def gateway_counts(self) -> GatewayCounts:
        """Requests, tokens and latencies counted by every gateway process so far."""

    def requests_by_worker(self) -> dict[str, int]:
        """Requests answered so far by each gateway worker (by index); empty without workers."""

    def usage_failure(self) -> str | None:
        """Why usage is not being recorded durably right now (None: it is)."""

    async def serving(self) -> None:
        """Returns once ``/v1`` is served (the workers may still be importing after ``start``)."""

    def shared_counters(self) -> SharedCounters:
        """The counters the limits are checked against, as every gateway process sees them."""

    async def close(self) -> None: ...


@dataclass
class GatewayWorkerPlan:
    """The public port's listening sockets (one per gateway worker) and the main process's
    private Unix socket, where the workers relay every path but ``/v1``."""

    sockets: list[socket.socket]
    api_socket_path: str
    # `serve --access-log`: the workers log their /v1 answers (server/access_log.py).
    access_log: bool = False


class _NoController:
    def poke(self) -> None:
        return None

    def gpu_inventory(self) -> GpuInventory:
        from modelyard.hardware.gpus import GpuInventory

        return GpuInventory(unavailable_reason="no controller running")

    def workers(self) -> list[Worker]:
        return []


class _NoDownloads:
    """No manager runs (API tests): tasks are stored but nothing runs them."""

    def __init__(self) -> None:
        self.options = DownloadOptions()

    def poke(self) -> None:
        return None

    def cancel(self, task_id: int) -> None:
        return None

    def live(self, task_id: int) -> dict[str, Any] | None:
        return None


class _NoKeyCache:
    def invalidate(self) -> None:
        return None


@dataclass
class ServerContext:
    settings: Settings
    database: Database
    endpoints: EndpointRegistry = field(default_factory=EndpointRegistry)
    controller: ControllerHandle = field(default_factory=_NoController)
    key_cache: KeyCacheHandle = field(default_factory=_NoKeyCache)
    # What one request may weigh (server/door/): headers, bodies per route, JSON nesting.
    limits: RequestLimits = field(default_factory=RequestLimits)
    downloads: DownloadsHandle = field(default_factory=_NoDownloads)
    demo: DemoStatus = field(default_factory=DemoStatus)
    # The token the CLI on this host sends instead of the password (server/auth.py); None: none.
    cli_token: str | None = None
    # Tasks started with the server (the demo's preparation); cancelled when it stops.
    background_tasks: set[asyncio.Task[None]] = field(default_factory=set)
    # The runtimes engines run on (processes, Docker; Ray on a cluster), shared by the controller
    # and the deployment checks (what a runtime mounts for the engine).
    runtimes: RuntimeSet = field(default_factory=RuntimeSet)
    # The Ray cluster engines run on (``serve --cluster``); None: this host only.
    cluster: ClusterHandle | None = None
    # Which worker has which model (``serve --cluster`` only).
    model_survey: ModelSurveyHandle | None = None
    # Wrong admin credentials and wrong API keys per client address (server/throttle.py).
    login_throttle: FailureThrottle = field(default_factory=lambda: FailureThrottle(what="login"))
    key_throttle: FailureThrottle = field(default_factory=lambda: FailureThrottle(what="API key"))
    # The running gateway (set by start_gateway), and, when /v1 is served by gateway worker
    # processes, what they are started with (None: /v1 is served in this process).
    gateway: GatewayHandle | None = None
    gateway_workers: GatewayWorkerPlan | None = None
    # The autoscaler's loop (control/autoscale/loop.py), set once it runs; None: not running.
    autoscaler: AutoscaleStatusSource | None = None
    # Seals secret values before they are stored (its key is <data-dir>/secret-key).
    secrets: SecretBox = field(init=False)

    def __post_init__(self) -> None:
        self.secrets = SecretBox.for_data_dir(self.settings.data_dir)


def server_context(request: Request) -> ServerContext:
    """FastAPI dependency: the running server's context."""
    context = request.app.state.context
    assert isinstance(context, ServerContext)
    return context
