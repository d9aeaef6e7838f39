"""The OpenAI-compatible gateway (``/v1``): API keys, routing to replicas, streaming, metering.

``GatewayApp`` (``app.py``) is the ASGI app in front of the server; ``start_gateway``
(``startup.py``) starts the gateway's parts in the server's lifespan, in the main process or as
worker processes (``supervisor.py``, ``worker.py``). What it guarantees: ``docs/gateway.md``;
how the processes share state: ``docs/architecture.md``.
"""

from modelyard.server.gateway.app import GatewayApp
from modelyard.server.gateway.runtime import GatewayRuntime, GatewaySettings
from modelyard.server.gateway.startup import start_gateway

__all__ = ["GatewayApp", "GatewayRuntime", "GatewaySettings", "start_gateway"]
