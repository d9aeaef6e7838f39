"""The OpenAI-compatible gateway (``/v1``): API keys, routing to replicas, streaming, metering.

The app factory includes ``gateway_router`` and, in its lifespan, calls ``start_gateway`` and
``GatewayRuntime.close`` (see ``runtime.py``). What it guarantees: ``docs/gateway.md``.
"""

from modelyard.server.gateway.router import gateway_router
from modelyard.server.gateway.runtime import GatewayRuntime, GatewaySettings, start_gateway

__all__ = ["GatewayRuntime", "GatewaySettings", "gateway_router", "start_gateway"]
