"""Running the server on its port: with gateway worker processes, or all in this process.

``run_server`` is what ``modelyard serve`` calls once the app is built.

- ``gateway_workers >= 1``: the public port is bound first (``modelyard serve`` binds its first
  socket before anything slow), one ``SO_REUSEPORT`` socket per worker (connections queue from
  that moment on), and this process serves the FastAPI app
  (REST API, console, ``/metrics``, controller) on a private Unix socket in a fresh 0700
  directory; the app's lifespan starts the workers (``supervisor.py``), which own the public
  port, answer ``/v1`` and relay the rest here.
- ``gateway_workers == 0``: one process; ``GatewayApp`` in front of the FastAPI app on the
  public port.

Usage::

    listener = bind_listener(host, port, reuse_port=True)      # server/startup.py
    run_server(context, create_app(context), listener=listener, gateway_workers=2)
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import tempfile
from pathlib import Path

import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp

from modelyard.errors import InvalidInput
from modelyard.server.access_log import AccessLog, enable_access_log
from modelyard.server.context import GatewayWorkerPlan, ServerContext
from modelyard.server.gateway.app import GatewayApp
from modelyard.server.gateway.startup import in_process_runtime

LISTEN_BACKLOG = 2048


def bind_more_sockets(listener: socket.socket, count: int) -> list[socket.socket]:
    """``count`` more listening sockets on ``listener``'s address, sharing the port with it
    (``SO_REUSEPORT``, which ``listener`` must have been bound with)."""
    address = listener.getsockname()
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(listener.family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(address)
            sock.listen(LISTEN_BACKLOG)
            sockets.append(sock)
    except OSError as error:
        for sock in sockets:
            sock.close()
        raise InvalidInput(
            f"cannot open the gateway workers' sockets on {address[0]}:{address[1]}: {error.strerror}",
            hint="run with --gateway-workers 0 to serve /v1 in the main process",
        ) from error
    return sockets


def run_server(
    context: ServerContext,
    app: FastAPI,
    *,
    listener: socket.socket,
    gateway_workers: int,
    access_log: bool = False,
    http_protocol: type[asyncio.Protocol] | str = "httptools",
) -> None:
    """Serve until interrupted (SIGINT / SIGTERM); returns after a graceful shutdown.

    ``listener`` is the public port's socket, bound already (with ``SO_REUSEPORT`` when there are
    gateway workers: it becomes worker 0's). ``access_log``: a line per answer, from the process
    that answered (``server/access_log.py``; uvicorn's own access log stays off).
    """
    if access_log:
        enable_access_log()
    if gateway_workers <= 0:
        front: ASGIApp = GatewayApp(lambda: in_process_runtime(context), fallback=app, limits=context.limits)
        if access_log:
            front = AccessLog(front)
        config = uvicorn.Config(
            front,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=5,
            http=http_protocol,
        )
        uvicorn.Server(config).run(sockets=[listener])
        return
    extra = bind_more_sockets(listener, gateway_workers - 1)
    private_directory = Path(tempfile.mkdtemp(prefix="modelyard-"))  # mode 0700
    api_socket_path = str(private_directory / "api.sock")
    context.gateway_workers = GatewayWorkerPlan(
        sockets=[listener, *extra], api_socket_path=api_socket_path, access_log=access_log
    )
    try:
        # Only the workers (this user) can reach this socket, so their X-Forwarded-For is trusted.
        config = uvicorn.Config(
            AccessLog(app) if access_log else app,
            uds=api_socket_path,
            proxy_headers=True,
            forwarded_allow_ips="*",
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=5,
            http=http_protocol,
        )
        uvicorn.Server(config).run()
    finally:
        for sock in extra:
            sock.close()
        shutil.rmtree(private_directory, ignore_errors=True)
