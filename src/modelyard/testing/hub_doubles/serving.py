"""What both hub doubles share: a threaded HTTP/1.1 server on loopback that records every request,
and the serving of a file's bytes with ``Range`` (206 / 416), ETags and the injected faults.

Usage (by the doubles)::

    server = DoubleHttpServer(handler_class)   # binds 127.0.0.1 on a free port
    server.start(); ...; server.stop()
"""

from __future__ import annotations

import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from modelyard.testing.hub_doubles.faults import Faults
from modelyard.testing.hub_doubles.repository import ServedFile

_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
# The longest a held transfer waits for its release before it closes by itself.
MAXIMUM_HOLD_SECONDS = 120.0
WRITE_CHUNK_BYTES = 16 << 10


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the double saw it. ``file`` is the repository path it served, if any."""

    server: str
    method: str
    path: str
    headers: dict[str, str]
    file: str | None = None
    status: int = 0
    bytes_sent: int = 0

    @property
    def range(self) -> str | None:
        return self.headers.get("range")


@dataclass
class RequestLog:
    requests: list[RecordedRequest] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def for_file(self, path: str, method: str = "GET") -> list[RecordedRequest]:
        with self._lock:
            return [item for item in self.requests if item.file == path and item.method == method]

    def downloads(self) -> list[RecordedRequest]:
        """Every GET that served file bytes."""
        with self._lock:
            return [item for item in self.requests if item.file is not None and item.method == "GET"]


class DoubleHttpServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, handler: type[BaseHTTPRequestHandler], name: str, owner: Any) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.name = name
        self.owner = owner
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, name=f"{self.name}-double", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


class DoubleRequestHandler(BaseHTTPRequestHandler):
    """Base handler: HTTP/1.1 keep-alive, quiet logs, request recording, file serving."""

    protocol_version = "HTTP/1.1"
    server: DoubleHttpServer

    def log_message(self, format: str, *args: Any) -> None:
        return None

    @property
    def log(self) -> RequestLog:
        log: RequestLog = self.server.owner.log
        return log

    @property
    def faults(self) -> Faults:
        faults: Faults = self.server.owner.faults
        return faults

    def record(self, status: int, file: str | None = None, bytes_sent: int = 0) -> None:
        self.log.add(
            RecordedRequest(
                server=self.server.name,
                method=self.command,
                path=self.path,
                headers={key.lower(): value for key, value in self.headers.items()},
                file=file,
                status=status,
                bytes_sent=bytes_sent,
            )
        )

    def send_json(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.record(status)

    def send_empty(self, status: int, headers: dict[str, str], file: str | None = None) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", "0")
        self.end_headers()
        self.record(status, file)

    def serve_file(self, served: ServedFile, headers: dict[str, str]) -> None:
        """The file's bytes (all, or from ``Range``), with ``headers``, faults applied on GET."""
        size = served.size
        start, end = 0, size - 1
        wanted = self.headers.get("Range")
        if wanted:
            match = _RANGE.match(wanted.strip())
            if match is None or int(match.group(1)) >= max(size, 1):
                self.send_empty(416, {"Content-Range": f"bytes */{size}"}, served.path)
                return
            start = int(match.group(1))
            end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
        faults = self.faults.take(served.path, start) if self.command == "GET" else []
        status_fault = next((fault for fault in faults if fault.kind == "status"), None)
        if status_fault is not None:
            self.send_empty(status_fault.status, {"Retry-After": "0"}, served.path)
            return
        content = served.content
        if any(fault.kind == "corrupt" for fault in faults):
            middle = size // 2
            content = content[:middle] + bytes([content[middle] ^ 0xFF]) + content[middle + 1 :]
        body = content[start : end + 1]
        self.send_response(206 if wanted else 200)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        if wanted:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if self.command == "HEAD":
            self.record(200, served.path)
            return
        cut = next((fault for fault in faults if fault.kind in ("drop", "hold")), None)
        throttle = next((fault.bytes_per_second for fault in faults if fault.kind == "throttle"), 0.0)
        limit = len(body) if cut is None else cut.at_byte - start
        sent = self._write(body[:limit], throttle)
        self.record(206 if wanted else 200, served.path, sent)
        if cut is None:
            return
        if cut.hold is not None:
            cut.hold.reached.set()
            cut.hold.released.wait(MAXIMUM_HOLD_SECONDS)
        self._drop()

    def _write(self, data: bytes, bytes_per_second: float = 0.0) -> int:
        sent = 0
        chunk_bytes = WRITE_CHUNK_BYTES if not bytes_per_second else max(1024, int(bytes_per_second / 10))
        try:
            for offset in range(0, len(data), chunk_bytes):
                self.wfile.write(data[offset : offset + chunk_bytes])
                sent += min(chunk_bytes, len(data) - offset)
                if bytes_per_second:
                    self.wfile.flush()
                    time.sleep(chunk_bytes / bytes_per_second)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        return sent

    def _drop(self) -> None:
        """Close the connection mid-body, as a dropped link would."""
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
