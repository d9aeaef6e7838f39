"""Actual state as users see it: instances, their transitions (events) and their log files.

Engine logs live in ``<data-dir>/instances/<instance uid>/start-<n>.log`` (the uid is never
reused, so a name deployed again after ``rm`` starts with logs of its own); an instance's
``log_path`` is the current start's file, and earlier starts' files stay beside it
(``start_logs`` lists them, ``log_file`` picks one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from modelyard.errors import InvalidInput, NotFound
from modelyard.store.tables import Deployment, Instance, InstanceEvent

START_LOG_PATTERN = re.compile(r"^start-(\d+)\.log$")


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def _next_verification(instance: Instance) -> datetime | None:
    requested = instance.verification_requested_at
    if requested is None or (instance.verified_at is not None and requested <= instance.verified_at):
        return None
    return requested


def instance_to_json(instance: Instance, now_seconds: float) -> dict[str, Any]:
    uptime_seconds = None
    if instance.state == "running" and instance.started_at is not None:
        uptime_seconds = max(0.0, now_seconds - instance.started_at.timestamp())
    handle = instance.handle or {}
    return {
        "id": instance.id,
        "uid": instance.uid,
        "replica_index": instance.replica_index,
        "state": instance.state,
        "reason": instance.reason,
        # Which runtime runs the engine (process, docker, ray) and the engine as it knows it.
        "runtime": instance.runtime,
        "engine": handle.get("label"),
        "engine_id": handle.get("id"),
        # Where the gateway reaches the engine, and the port the engine itself was told.
        "host": instance.host,
        "port": instance.port,
        "engine_port": instance.engine_port,
        "mounts": instance.mounts or [],
        "gpu_ids": instance.gpu_ids,
        # Where its start runs and, when placed by memory, the bytes booked and the knob's value.
        "placement": instance.placement,
        "pid": instance.pid,
        "start_count": instance.start_count,
        "restart_count": instance.restart_count,
        "next_start_at": _iso(instance.next_start_at),
        "started_at": _iso(instance.started_at),
        "ready_at": _iso(instance.ready_at),
        "uptime_seconds": uptime_seconds,
        "diagnosis": instance.diagnosis,
        "verification": instance.verification,
        "verified_at": _iso(instance.verified_at),
        # When the controller runs the suite again (a retry after a busy engine failed it, or
        # a user's request not yet served); None: not scheduled.
        "next_verification_at": _iso(_next_verification(instance)),
        "log_path": instance.log_path,
        "command": instance.command,
        # The image pull of the current start (control/image_pulls.py): state pulling / pulled /
        # failed, layers and bytes; None when nothing was pulled for it.
        "image_pull": instance.image_pull,
        # A finer word than the state while it starts: "pulling" during its image pull; else None.
        "stage": "pulling" if _pulling(instance) else None,
    }


def _pulling(instance: Instance) -> bool:
    return instance.state == "starting" and (instance.image_pull or {}).get("state") == "pulling"


def event_to_json(event: InstanceEvent) -> dict[str, Any]:
    return {
        "deployment": event.deployment_name,
        "deployment_uid": event.deployment_uid,
        "instance_id": event.instance_id,
        "instance_uid": event.instance_uid,
        "replica_index": event.replica_index,
        "from_state": event.from_state,
        "to_state": event.to_state,
        "reason": event.reason,
        "at": event.at.isoformat(),
    }


def choose_instance(deployment: Deployment, instance_id: int | None) -> Instance:
    """The instance asked for, or the first replica when none is named."""
    if instance_id is not None:
        for instance in deployment.instances:
            if instance.id == instance_id:
                return instance
        ids = ", ".join(str(instance.id) for instance in deployment.instances) or "none"
        raise NotFound(
            f"deployment {deployment.name!r} has no instance {instance_id}",
            hint=f"its instances: {ids} (see `modelyard ps {deployment.name}`)",
        )
    if not deployment.instances:
        raise NotFound(
            f"deployment {deployment.name!r} has no instances yet",
            hint="wait for the controller to create them (`modelyard ps`)",
        )
    return deployment.instances[0]


@dataclass(frozen=True)
class StartLog:
    """One start's log file of an instance (``start-<number>.log``)."""

    number: int
    path: Path
    size_bytes: int
    modified_at: datetime
    current: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "start": self.number,
            "file": self.path.name,
            "size_bytes": self.size_bytes,
            "modified_at": self.modified_at.isoformat(),
            "current": self.current,
        }


def _not_started(instance: Instance) -> NotFound:
    return NotFound(
        f"instance {instance.id} has not been started yet, so it has no log",
        hint=f"its state is {instance.state}: {instance.reason or 'no reason recorded'}",
    )


def current_start_number(instance: Instance) -> int | None:
    """The number of the start whose log is the instance's current one; None before a start."""
    if not instance.log_path:
        return None
    match = START_LOG_PATTERN.match(Path(instance.log_path).name)
    return int(match.group(1)) if match else instance.start_count


def start_logs(instance: Instance) -> list[StartLog]:
    """Every start's log file kept beside the current one, oldest first (none before a start)."""
    if not instance.log_path:
        return []
    current = Path(instance.log_path)
    current_number = current_start_number(instance)
    found: list[StartLog] = []
    try:
        entries = list(current.parent.iterdir())
    except FileNotFoundError:
        return []
    for path in entries:
        match = START_LOG_PATTERN.match(path.name)
        if match is None:
            continue
        try:
            status = path.stat()
        except FileNotFoundError:  # removed while listing
            continue
        number = int(match.group(1))
        found.append(
            StartLog(
                number=number,
                path=path,
                size_bytes=status.st_size,
                modified_at=datetime.fromtimestamp(status.st_mtime, UTC),
                current=number == current_number,
            )
        )
    return sorted(found, key=lambda start: start.number)


def log_file(instance: Instance, previous: bool = False, start: int | None = None) -> Path:
    """The current start's log file, the one before it when ``previous``, or start ``start``'s."""
    if previous and start is not None:
        raise InvalidInput(
            "previous and start name two different logs; give one of them",
            hint="start=N reads start N; previous=true the start before the current one",
        )
    if not instance.log_path:
        raise _not_started(instance)
    current = Path(instance.log_path)
    current_number = current_start_number(instance) or 0
    if start is not None:
        if start == current_number:
            return current
        wanted = current.with_name(f"start-{start}.log")
        if not wanted.is_file():
            kept = ", ".join(str(entry.number) for entry in start_logs(instance)) or "none"
            raise NotFound(
                f"instance {instance.id} has no log of start {start}",
                hint=f"its starts with a log: {kept} (the current one is {current_number})",
            )
        return wanted
    if not previous:
        return current
    if current_number <= 1:
        raise NotFound(
            f"instance {instance.id} has started only once; there is no previous log",
            hint="leave out --previous to see the current log",
        )
    return current.with_name(f"start-{current_number - 1}.log")


def read_tail(path: Path, lines: int | None, block_bytes: int = 65536) -> tuple[bytes, int]:
    """The last ``lines`` lines of ``path`` (all when None) and the file size read up to."""
    with path.open("rb") as handle:
        handle.seek(0, 2)
        size = handle.tell()
        if lines is None:
            handle.seek(0)
            return handle.read(size), size
        if lines <= 0:
            return b"", size
        position = size
        data = b""
        # One more newline than lines wanted: the text after the (lines+1)-th newline from the end.
        while position > 0 and data.count(b"\n") <= lines:
            step = min(block_bytes, position)
            position -= step
            handle.seek(position)
            data = handle.read(step) + data
        kept = data.split(b"\n")
        trailing = kept[-1] == b""
        if trailing:
            kept = kept[:-1]
        text = b"\n".join(kept[-lines:])
        return (text + b"\n" if trailing else text), size
