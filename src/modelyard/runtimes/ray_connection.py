"""The server's connection to its Ray cluster, with token authentication on.

Ray (``pip install 'modelyard[ray]'``) is imported only here and in the other ``ray_*`` modules,
and only when a cluster is used: the single-host server never imports it. Token authentication
is Ray's own (from Ray 2.52: ``RAY_AUTH_MODE=token`` and the token in ``RAY_AUTH_TOKEN``, read
by every Ray process at start); the head, every node that joins and every driver must carry the
same token, or Ray refuses the connection.

Usage::

    cluster = RayCluster(address="10.0.0.5:6379", token=token)
    connect(cluster)            # ray.init in this process, namespace "modelyard"
"""

from __future__ import annotations

import importlib.util
import logging
import os
from dataclasses import dataclass

from modelyard.errors import EngineStartFailed, InvalidInput

logger = logging.getLogger(__name__)

NAMESPACE = "modelyard"
AUTH_MODE_VARIABLE = "RAY_AUTH_MODE"
AUTH_TOKEN_VARIABLE = "RAY_AUTH_TOKEN"
MINIMUM_TOKEN_CHARACTERS = 32
INSTALL_HINT = "pip install 'modelyard[ray]' (on the server and on every worker, the same Ray version)"


@dataclass(frozen=True)
class RayCluster:
    """Where the cluster's head is (``HOST:PORT`` of its GCS) and the token that opens it."""

    address: str
    token: str
    # This host's address in the cluster (Ray's --node-ip-address); None: Ray finds it.
    node_ip: str | None = None

    def __post_init__(self) -> None:
        if len(self.token) < MINIMUM_TOKEN_CHARACTERS:
            raise InvalidInput(
                f"the cluster token has {len(self.token)} characters; at least {MINIMUM_TOKEN_CHARACTERS} "
                "are needed",
                hint="use the token `modelyard serve --cluster` printed (also in <data-dir>/cluster-token)",
            )


def ray_installed() -> bool:
    """Whether Ray can be imported (without importing it: Ray reads its token settings once, at
    import, so nothing may import it before ``connect`` has set them)."""
    return importlib.util.find_spec("ray") is not None


def require_ray() -> None:
    if not ray_installed():
        raise InvalidInput("Ray is not installed, and clusters run on Ray", hint=INSTALL_HINT)


def token_environment(token: str) -> dict[str, str]:
    """The variables every Ray process of the cluster needs (head, nodes, drivers)."""
    return {AUTH_MODE_VARIABLE: "token", AUTH_TOKEN_VARIABLE: token}


def connect(cluster: RayCluster) -> None:
    """Join this process to the cluster as a driver (once; a second call does nothing)."""
    require_ray()
    os.environ.update(token_environment(cluster.token))
    import ray

    if ray.is_initialized():
        return
    try:
        ray.init(
            address=cluster.address,
            namespace=NAMESPACE,
            log_to_driver=False,
            logging_level=logging.WARNING,
            _node_ip_address=cluster.node_ip,
        )
    except ConnectionError as error:
        raise EngineStartFailed(
            f"cannot reach the Ray cluster at {cluster.address}: {error}",
            hint="start the head first (`modelyard serve --cluster`), or check --ray-address",
        ) from error
    except ray.exceptions.AuthenticationError as error:
        raise EngineStartFailed(
            f"the Ray cluster at {cluster.address} refused the token: {error}",
            hint="give the token of that cluster (<data-dir>/cluster-token on its head)",
        ) from error
    logger.info("connected to the Ray cluster at %s", cluster.address)


def disconnect() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()


def local_node_id() -> str:
    """The Ray node this process runs on (the head, for the server)."""
    import ray

    return str(ray.get_runtime_context().get_node_id())
