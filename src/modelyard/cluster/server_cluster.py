"""The cluster as ``modelyard serve --cluster`` holds it: the head (started here, or given by
``--ray-address``), the server's connection to it as a Ray driver, the Ray runtime its engines
run on, and the worker directory its placement reads.

Ray is imported by ``open_cluster`` (after the token is in the environment: Ray reads it once,
at import), never by the single-host server.

Usage::

    cluster = open_cluster(settings, say=print)   # blocks until the head answers
    runtimes = RuntimeSet(..., ray=cluster.runtime)
    ...
    cluster.close()                                # after the controller stopped the engines
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from modelyard.cluster.head import HeadRecord, start_head, stop_head
from modelyard.cluster.token import ENV_CLUSTER_TOKEN, cluster_token
from modelyard.errors import InvalidInput
from modelyard.runtimes.ray_connection import RayCluster, connect, disconnect, require_ray
from modelyard.settings import Settings

if TYPE_CHECKING:
    from modelyard.cluster.workers import WorkerDirectory, WorkerStatus
    from modelyard.control.scheduler import Worker
    from modelyard.runtimes.ray_runtime import RayRuntime

logger = logging.getLogger(__name__)


@dataclass
class ServerCluster:
    settings: Settings
    address: str
    token: str
    # The token was made now (``serve`` shows it this once).
    token_created: bool
    # The head this data directory runs (stopped with the server); None with --ray-address.
    head: HeadRecord | None
    directory: WorkerDirectory
    runtime: RayRuntime

    def workers(self) -> list[Worker]:
        """Every worker now (blocking: the controller calls it in a thread)."""
        return self.directory.workers()

    def statuses(self) -> list[WorkerStatus]:
        """The workers as the controller last read them (``GET /api/v1/workers``)."""
        return self.directory.last_read()

    def model_directory_problems(self, model_path: str) -> tuple[list[str], dict[str, str]]:
        """The doctor's model directory inspection on every ready GPU worker (blocking)."""
        return self.directory.model_directory_problems(model_path)

    def node_id_of(self, worker: str) -> str | None:
        """The Ray node id of the ready worker named ``worker`` (blocking: reads the workers first
        when they were never read, as right after a restart, when interrupted pushes resume)."""
        if not self.directory.last_read():
            self.directory.read()
        return self.directory.node_id_of(worker)

    def run_on(self, worker: str, function: Any, *arguments: Any) -> Any:
        """``function(*arguments)`` as a Ray task on ``worker`` (blocking)."""
        return self.directory.run_on(worker, function, *arguments)

    def close(self) -> None:
        disconnect()
        if self.head is not None:
            stop_head(self.settings, self.head)


def _check_address(address: str) -> str:
    host, separator, port = address.strip().rpartition(":")
    if "://" in address or not separator or not host or not port.isdigit():
        raise InvalidInput(
            f"--ray-address {address!r} is not HOST:PORT",
            hint="the address of the Ray head's GCS, e.g. 10.0.0.5:6379 (what `modelyard serve --cluster` "
            "printed on that host)",
        )
    return address.strip()


def open_cluster(settings: Settings, *, say: Callable[[str], None]) -> ServerCluster:
    """Start (or find) the head, connect this process to it, make the runtime and directory."""
    require_ray()
    head: HeadRecord | None = None
    if settings.ray_address:
        address = _check_address(settings.ray_address)
        if not settings.cluster_token_file.is_file() and ENV_CLUSTER_TOKEN not in os.environ:
            raise InvalidInput(
                f"--ray-address {address} needs that cluster's token",
                hint=f"put it in {settings.cluster_token_file} (mode 0600) or in ${ENV_CLUSTER_TOKEN}",
            )
        token, created = cluster_token(settings.cluster_token_file)
    else:
        token, created = cluster_token(settings.cluster_token_file)
        head = start_head(settings, token, say=say)
        address = head.address
    connect(RayCluster(address=address, token=token, node_ip=settings.ray_node_ip))
    from modelyard.cluster.workers import WorkerDirectory
    from modelyard.runtimes.ray_runtime import RayRuntime
    from modelyard.runtimes.selection import docker_options

    try:
        directory = WorkerDirectory()
        runtime = RayRuntime(
            local_engine_ports=settings.engine_ports, docker_options=docker_options(settings)
        )
    except Exception:
        disconnect()
        raise
    return ServerCluster(settings, address, token, created, head, directory, runtime)
