"""The messages between the main process and its gateway workers, and how they are framed.

One ``socketpair`` per worker carries them both ways: a 4-byte big-endian length, then the
message as a JSON object whose ``"type"`` names its class. Every message that crosses the process
boundary is defined here (architecture: ``docs/architecture.md``, "Gateway workers").

main -> worker:

- ``WorkerHello``: the first message: who the worker is and everything it needs to serve.
- ``EndpointsChanged``: the whole endpoint registry, after every change.
- ``KeysChanged``: an API key was created, changed or revoked: drop the key cache now.
- ``Drain``: stop taking connections, finish the requests in flight, exit.
- ``UsageCommitted``: the worker's usage rows up to a journal sequence are in the database.
- ``QuotaUsage``: tokens recorded this period for keys with a quota, from every worker.

worker -> main:

- ``WorkerReady``: the worker is serving.
- ``UsageBatch``: finished requests, written once to ``usage_records`` by the main process.
- ``ReplicaRefused``: an engine refused a connection; the controller should look now.
- ``ReplicaWanted``: a request is held for a deployment with no ready replica (scale to zero):
  the autoscaler should start one now.
- ``MetricsSnapshot``: the worker's cumulative counts, every second.

Usage::

    channel = await Channel.open(sock)
    channel.send(KeysChanged())
    message = await channel.receive()     # None once the other side is gone
"""

from __future__ import annotations

import asyncio
import socket
import struct
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import orjson

_LENGTH = struct.Struct(">I")
# A message larger than this is a bug (the endpoint snapshot of hundreds of replicas is ~100 KiB).
MAX_MESSAGE_BYTES = 64 << 20


@dataclass(frozen=True)
class Message:
    kind: ClassVar[str] = ""

    def to_frame(self) -> bytes:
        # Shallow: dataclasses.asdict deep-copies every value (2 ms for a batch of 46 usage rows).
        fields_ = {item.name: getattr(self, item.name) for item in fields(self)}
        data = orjson.dumps({"type": self.kind, **fields_})
        return _LENGTH.pack(len(data)) + data


@dataclass(frozen=True)
class WorkerHello(Message):
    kind: ClassVar[str] = "worker_hello"
    index: int
    workers: int
    # GatewaySettings.to_json(), RegistrySnapshot.to_json()
    settings: dict[str, Any]
    endpoints: dict[str, Any]
    shared_counters_name: str
    database_url: str
    # The main process's Unix socket: where every path but /v1 is relayed.
    api_socket_path: str
    # RequestLimits as a mapping (server/door/limits.py): the same bounds as the main process.
    limits: dict[str, int] = field(default_factory=dict)
    # Where the worker journals its usage rows (its own segments, by pid).
    journal_directory: str = ""
    # `serve --access-log`: the worker logs a line per /v1 answer (server/access_log.py).
    access_log: bool = False
    # The API-key throttle's table of every worker (server/throttle_table.py): its shared-memory
    # segment and the lock file each worker opens itself.
    key_throttle_name: str = ""
    key_throttle_lock_path: str = ""


@dataclass(frozen=True)
class EndpointsChanged(Message):
    kind: ClassVar[str] = "endpoints_changed"
    endpoints: dict[str, Any]


@dataclass(frozen=True)
class KeysChanged(Message):
    kind: ClassVar[str] = "keys_changed"


@dataclass(frozen=True)
class Drain(Message):
    kind: ClassVar[str] = "drain"


@dataclass(frozen=True)
class WorkerReady(Message):
    kind: ClassVar[str] = "worker_ready"
    index: int
    pid: int


@dataclass(frozen=True)
class UsageBatch(Message):
    kind: ClassVar[str] = "usage_batch"
    # UsageRow.to_json() each
    rows: list[list[Any]] = field(default_factory=list)
    # The worker's journal sequence of the last row (worker_usage.py).
    through_sequence: int = 0


@dataclass(frozen=True)
class UsageCommitted(Message):
    """main -> worker: the worker's rows up to this journal sequence are in the database."""

    kind: ClassVar[str] = "usage_committed"
    through_sequence: int


@dataclass(frozen=True)
class QuotaUsage(Message):
    """main -> every worker: what keys with a token quota have used in their current period, as
    recorded in ``usage_records`` from every worker (``quota_ledger.py``)."""

    kind: ClassVar[str] = "quota_usage"
    # [key id, the period's start as unix seconds, tokens used since] each
    used: list[tuple[int, float, int]] = field(default_factory=list)


@dataclass(frozen=True)
class ReplicaRefused(Message):
    kind: ClassVar[str] = "replica_refused"
    deployment_name: str
    instance_id: int


@dataclass(frozen=True)
class ReplicaWanted(Message):
    kind: ClassVar[str] = "replica_wanted"
    deployment_name: str


@dataclass(frozen=True)
class MetricsSnapshot(Message):
    kind: ClassVar[str] = "metrics_snapshot"
    index: int
    # GatewayCounts.snapshot()
    counts: dict[str, Any]
    # Why the worker's usage journal cannot be written (None: it can).
    journal_failure: str | None = None


_KINDS: dict[str, type[Message]] = {
    kind.kind: kind
    for kind in (
        WorkerHello,
        EndpointsChanged,
        KeysChanged,
        Drain,
        WorkerReady,
        UsageBatch,
        UsageCommitted,
        QuotaUsage,
        ReplicaRefused,
        ReplicaWanted,
        MetricsSnapshot,
    )
}


class ChannelError(Exception):
    """The other side sent something that is not a message of this module."""


def decode(data: bytes) -> Message:
    payload = orjson.loads(data)
    if not isinstance(payload, dict):
        raise ChannelError(f"a message must be a JSON object, got {type(payload).__name__}")
    kind = _KINDS.get(str(payload.pop("type", "")))
    if kind is None:
        raise ChannelError(f"unknown message type in {sorted(payload)}")
    names = {item.name for item in fields(kind)}
    return kind(**{name: value for name, value in payload.items() if name in names})


class Channel:
    """Framed messages over one stream socket; ``send`` never waits (the socket buffers)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def open(cls, sock: socket.socket) -> Channel:
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=MAX_MESSAGE_BYTES)
        return cls(reader, writer)

    def send(self, message: Message) -> None:
        if not self._writer.is_closing():
            self._writer.write(message.to_frame())

    async def drain(self) -> None:
        if not self._writer.is_closing():
            await self._writer.drain()

    async def receive(self) -> Message | None:
        """The next message; None when the other side closed the channel."""
        try:
            head = await self._reader.readexactly(_LENGTH.size)
            (length,) = _LENGTH.unpack(head)
            if length > MAX_MESSAGE_BYTES:
                raise ChannelError(f"a message of {length} bytes is more than {MAX_MESSAGE_BYTES}")
            return decode(await self._reader.readexactly(length))
        except (asyncio.IncompleteReadError, ConnectionError):
            return None

    def close(self) -> None:
        self._writer.close()
