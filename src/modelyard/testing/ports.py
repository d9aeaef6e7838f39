"""Ports for test servers that stay right when tests run in parallel (``pytest -n``).

Probing for a free port (bind to port 0, read it, close) and binding it later is a race: between
the two, another test's server, or any outgoing connection (its source port comes from the same
range the kernel picks port 0 from), can take it. Two ways instead, best first:

- ``listening_socket()``: a socket already bound and listening; hand it to the server
  (uvicorn's ``Server.run(sockets=[...])``). There is no moment when the port is free.
- ``reserved_port()``: for a child process that binds its port itself (``modelyard serve
  --port``, an engine's ``--port``). The port comes from this test process's own slice of
  20000-32767: below the kernel's ephemeral ports (32768 and up, where port 0 and outgoing
  connections draw from) and above Ray's worker ports (10002-19999), so no other test process of
  the run (each xdist worker has its own slice) and no outgoing connection is ever given it. A
  port is handed out once per process (until the slice wraps around) and only while nothing is
  bound to it.
- ``refusing_port()``: a port where connections are refused (bound, not listening), held for as
  long as the test needs nobody to answer there.

Usage::

    with listening_socket() as sock:
        server.run(sockets=[sock])             # the port: sock.getsockname()[1]
    port = reserved_port()                     # modelyard serve --port {port}
    window = reserved_port_window(4)           # --engine-ports {window}
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager

from modelyard.runtimes.engine_ports import PortRange

# Ports the kernel never hands out by itself: above Ray's worker ports, below the ephemeral range.
FIRST_TEST_PORT = 20000
LAST_TEST_PORT = 32767
SLICE_PORTS = 1000
_SLICE_COUNT = (LAST_TEST_PORT - FIRST_TEST_PORT + 1) // SLICE_PORTS  # 12
# pytest-xdist names its workers gw0, gw1, ... in this variable; a plain pytest run has none.
XDIST_WORKER_VARIABLE = "PYTEST_XDIST_WORKER"

_handed_out: set[int] = set()
_next_offset: int | None = None


def worker_slice() -> PortRange:
    """This process's ports: the xdist worker's slice (``gw3``: the fourth), else the last one."""
    match = re.fullmatch(r"gw(\d+)", os.environ.get(XDIST_WORKER_VARIABLE, ""))
    index = int(match.group(1)) % (_SLICE_COUNT - 1) if match else _SLICE_COUNT - 1
    first = FIRST_TEST_PORT + index * SLICE_PORTS
    return PortRange(first, first + SLICE_PORTS - 1)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # As servers bind (uvicorn sets it): a port with closed connections in TIME_WAIT is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def reserved_port_window(size: int = 1) -> PortRange:
    """``size`` consecutive ports of this process's slice that nothing is bound to and that were
    not handed out before (see the module docstring)."""
    global _next_offset
    ports = worker_slice()
    if _next_offset is None:
        # Two sessions on one host (not workers of one run) start apart in the same slice.
        _next_offset = (os.getpid() * 7) % ports.size
    for _ in range(2 * ports.size):
        if _next_offset + size > ports.size:
            _next_offset = 0
            _handed_out.clear()  # wrapped around: ports freed since are good again
        first = ports.first + _next_offset
        _next_offset += size
        window = range(first, first + size)
        if all(port not in _handed_out and _bindable(port) for port in window):
            _handed_out.update(window)
            return PortRange(first, first + size - 1)
    raise AssertionError(f"no {size} free consecutive ports in {ports} for this test process")


def reserved_port() -> int:
    """A port for a child process that binds it itself (see the module docstring)."""
    return reserved_port_window(1).first


@contextmanager
def listening_socket(host: str = "127.0.0.1", backlog: int = 128) -> Iterator[socket.socket]:
    """A TCP socket bound to a port the kernel chose and listening; closed afterwards."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, 0))
        sock.listen(backlog)
        yield sock
    finally:
        sock.close()


@contextmanager
def refusing_port(host: str = "127.0.0.1") -> Iterator[int]:
    """A port on which connections are refused, nobody else's while the block runs."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        yield int(sock.getsockname()[1])
