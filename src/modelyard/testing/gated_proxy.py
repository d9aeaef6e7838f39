"""A TCP relay on loopback that holds its answers after so many bytes until it is released.

Put in front of a server (a registry), it lets a test see a transfer in the middle: the first
``hold_after_bytes`` of the server's answers pass, then nothing more until ``release()``, so the
client stays mid-download, deterministically, for as long as the test looks (no sleep, no timing).

Usage::

    with GatedProxy.start("127.0.0.1", registry.port, hold_after_bytes=2**20) as proxy:
        ...   # pull from 127.0.0.1:{proxy.port}; the pull stops after about 1 MiB
        proxy.release()
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

CHUNK_BYTES = 64 * 1024


@dataclass
class GatedProxy:
    upstream_host: str
    upstream_port: int
    hold_after_bytes: int
    listener: socket.socket = field(default_factory=lambda: socket.create_server(("127.0.0.1", 0)))
    released: threading.Event = field(default_factory=threading.Event)
    relayed_bytes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closed: threading.Event = field(default_factory=threading.Event)
    _sockets: list[socket.socket] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    @classmethod
    @contextmanager
    def start(cls, upstream_host: str, upstream_port: int, *, hold_after_bytes: int) -> Iterator[GatedProxy]:
        proxy = cls(upstream_host, upstream_port, hold_after_bytes)
        acceptor = threading.Thread(target=proxy._accept, name="gated-proxy", daemon=True)
        acceptor.start()
        try:
            yield proxy
        finally:
            proxy.close()

    def release(self) -> None:
        self.released.set()

    def close(self) -> None:
        self._closed.set()
        self.released.set()
        self.listener.close()
        for connection in list(self._sockets):
            with contextlib.suppress(OSError):
                connection.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection((self.upstream_host, self.upstream_port))
            except OSError:
                client.close()
                continue
            self._sockets += [client, upstream]
            threading.Thread(target=self._relay, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._relay, args=(upstream, client, True), daemon=True).start()

    def _relay(self, source: socket.socket, target: socket.socket, gated: bool) -> None:
        try:
            while True:
                data = source.recv(CHUNK_BYTES)
                if not data:
                    break
                if gated:
                    with self._lock:
                        self.relayed_bytes += len(data)
                        over = self.relayed_bytes > self.hold_after_bytes
                    if over:
                        self.released.wait()
                target.sendall(data)
        except OSError:
            pass
        finally:
            for connection in (source, target):
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
