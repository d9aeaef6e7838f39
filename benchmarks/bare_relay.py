"""The floor of a user-space relay on this machine: bytes copied between two TCP connections by
uvloop protocols, with no HTTP parsing, no ASGI and no gateway logic.

``gateway_overhead.py`` runs it between the lean client and the exact upstream, and measures its
CPU per request and per chunk as it does the gateway's. Whatever a Python proxy on uvloop does per
chunk, it does at least this: wake up in ``epoll_wait``, ``read`` from one socket, ``write`` to
the other. The gateway's figures above this floor are its own code; the floor itself is the
kernel's and the event loop's.

    python benchmarks/bare_relay.py --port 9000 --upstream 127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import asyncio

import uvloop


class _Side(asyncio.Protocol):
    """One end of a relayed connection: what it receives is written to its peer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self._early: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)
        else:
            self._early.append(data)

    def attach(self, peer: _Side) -> None:
        self.peer = peer
        early, self._early = self._early, []
        for data in early:
            self.data_received(data)

    def connection_lost(self, error: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


async def serve(port: int, upstream_host: str, upstream_port: int) -> None:
    loop = asyncio.get_running_loop()
    connecting: set[asyncio.Task[None]] = set()

    def accepted() -> _Side:
        client = _Side()

        async def connect() -> None:
            try:
                _, engine = await loop.create_connection(_Side, upstream_host, upstream_port)
            except OSError:
                if client.transport is not None:
                    client.transport.close()
                return
            engine.attach(client)
            client.attach(engine)

        task = loop.create_task(connect())
        connecting.add(task)
        task.add_done_callback(connecting.discard)
        return client

    server = await loop.create_server(accepted, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="HOST:PORT of the upstream")
    arguments = parser.parse_args()
    host, _, port = arguments.upstream.rpartition(":")
    uvloop.run(serve(arguments.port, host, int(port)))


if __name__ == "__main__":
    main()
