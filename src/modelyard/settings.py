"""Server settings, each defined once: type, default, environment variable and help text.

``modelyard serve`` builds its options from these; the environment is read once, here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from modelyard.runtimes.engine_ports import PortRange

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_URL = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"

# Ray's own default GCS port; the port workers join (`modelyard worker join HOST:6379`).
DEFAULT_RAY_PORT = 6379

ENV_DATA_DIR = "MODELYARD_DATA_DIR"
ENV_DATABASE_URL = "MODELYARD_DATABASE_URL"
ENV_URL = "MODELYARD_URL"
# What a placement by memory books on each GPU beyond the estimate, outside the engine's memory knob
# (so that the engine does not take it): room for what the estimate misses (CUDA graphs larger than
# counted, the allocator's fragmentation). ``serve --placement-headroom`` / this variable, in GiB.
ENV_PLACEMENT_HEADROOM = "MODELYARD_PLACEMENT_HEADROOM_GIB"
DEFAULT_PLACEMENT_HEADROOM_BYTES = 1 << 29  # 0.5 GiB
PLACEMENT_HEADROOM_LIMIT_GIB = 64.0


def default_gateway_workers() -> int:
    """``--gateway-workers`` by default: one worker per usable core but one (kept for the main
    process), at least 1, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores - 1))


def default_data_dir() -> Path:
    """``$MODELYARD_DATA_DIR``, else ``$XDG_DATA_HOME/modelyard``, else ``~/.local/share/modelyard``."""
    configured = os.environ.get(ENV_DATA_DIR)
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "modelyard"


# The scrape token of /metrics in the data directory (made at the first start, mode 0600); the
# CLI on the same host reads it (``modelyard tune``'s acceptance figures).
METRICS_TOKEN_FILE_NAME = "metrics-token"


@dataclass(frozen=True)
class Settings:
    """Everything the server needs to start.

    Usage::

        settings = Settings(data_dir=Path("/var/lib/modelyard"))
        settings.database_url  # sqlite:////var/lib/modelyard/modelyard.db
    """

    data_dir: Path
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    # None: a SQLite file in the data directory.
    database_url_override: str | None = None
    deploy_demo: bool = True
    # Containers (backend versions with an image): host networking or a published port,
    # --ipc host or a private /dev/shm of this size, extra volumes "HOST:CONTAINER[:ro|rw]".
    docker_network: str = "host"
    docker_shm_size: str | None = None
    docker_volumes: tuple[str, ...] = ()
    # A cluster (docs/clusters.md): engines run through Ray on the workers that joined. With
    # ``cluster`` and no ``ray_address`` the server starts a Ray head on ``ray_port``;
    # ``ray_address`` ("HOST:PORT") connects to a head that runs already.
    cluster: bool = False
    ray_address: str | None = None
    ray_port: int = DEFAULT_RAY_PORT
    # This host's address in the cluster (Ray's --node-ip-address); None: Ray finds it (the
    # address of the interface with the default route).
    ray_node_ip: str | None = None
    # More options of the head's ``ray start`` (``--node-manager-port=8076``: fixed ports).
    ray_head_arguments: tuple[str, ...] = ()
    # ``--engine-ports A-B``: every engine port on this host from this range (firewalls between
    # hosts); None: any free port. On a cluster it is the head node's ``modelyard.io/engine-ports``.
    engine_ports: PortRange | None = None
    # Booked on each GPU beyond the estimate by placements by memory (``ENV_PLACEMENT_HEADROOM``).
    placement_headroom_bytes: int = DEFAULT_PLACEMENT_HEADROOM_BYTES

    @property
    def database_url(self) -> str:
        if self.database_url_override:
            return self.database_url_override
        return f"sqlite:///{self.data_dir / 'modelyard.db'}"

    @property
    def instances_dir(self) -> Path:
        """One folder per instance, named by its uid (never reused): ``start-<n>.log`` for each
        start, and ``work/``, the engine's working directory."""
        return self.data_dir / "instances"

    @property
    def models_dir(self) -> Path:
        """Where prepared models live (the demo model, later hub downloads)."""
        return self.data_dir / "models"

    @property
    def admin_password_file(self) -> Path:
        """The bootstrap admin password (mode 0600), read by the CLI on the same host."""
        return self.data_dir / "admin-password"

    @property
    def cli_token_file(self) -> Path:
        """The token the CLI on this host authenticates with instead of the password (mode 0600)."""
        return self.data_dir / "cli-token"

    @property
    def cluster_token_file(self) -> Path:
        """The cluster's token (Ray's token authentication), made at the first ``serve --cluster``
        (mode 0600); every worker joins with it."""
        return self.data_dir / "cluster-token"

    @property
    def cluster_head_file(self) -> Path:
        """The Ray head this server started: its address and process, so that a restarted server
        finds it (and the engines on the cluster) again."""
        return self.data_dir / "cluster-head.json"

    @property
    def server_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}"


def parse_placement_headroom(value: float) -> int:
    """``--placement-headroom`` / ``MODELYARD_PLACEMENT_HEADROOM_GIB`` (GiB) as bytes; ``InvalidInput``
    outside 0 to ``PLACEMENT_HEADROOM_LIMIT_GIB``."""
    from modelyard.errors import InvalidInput

    if not 0 <= value <= PLACEMENT_HEADROOM_LIMIT_GIB:
        raise InvalidInput(
            f"placement headroom {value:g} GiB is out of range",
            hint=f"give 0 to {PLACEMENT_HEADROOM_LIMIT_GIB:g} GiB with --placement-headroom or "
            f"{ENV_PLACEMENT_HEADROOM} (default {DEFAULT_PLACEMENT_HEADROOM_BYTES / (1 << 30):g})",
        )
    return int(value * (1 << 30))
