"""The Ray head that ``modelyard serve --cluster`` runs on its host.

The head is ``ray start --head --block`` as a child process in a session of its own, token
authentication on (the token in its environment), this host's GPUs (``--num-gpus`` from NVML)
and the ``modelyard.io/worker`` label set to the host's name. Its address and pid are recorded
in ``<data-dir>/cluster-head.json``:

- a server killed with SIGKILL leaves the head (and the engines on the cluster) running; the
  next ``serve --cluster`` finds the head by that record and uses it again, so the engines are
  re-adopted and the workers stay joined;
- a server that stops gracefully stops its head (SIGTERM: ``ray start --block`` stops the
  head's processes), after its engines; the workers' ``modelyard worker join`` ends with it.

Usage::

    head = start_head(settings, token, say=print)
    ...
    stop_head(head)
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from modelyard.cluster.ray_processes import (
    RAY_WORKER_PORTS,
    STARTED_LINE,
    check_ray_arguments,
    failure_lines,
    failure_reason,
    labels_argument,
    node_ip_of,
    ray_command,
    ray_environment,
    ray_ports,
)
from modelyard.errors import EngineStartFailed, InvalidInput
from modelyard.hardware.gpus import read_gpu_inventory
from modelyard.runtimes.docker_capability import DockerCapability
from modelyard.runtimes.engine_ports import ENGINE_PORTS_LABEL, PortRange, check_apart
from modelyard.runtimes.ray_names import WORKER_LABEL
from modelyard.settings import DEFAULT_RAY_PORT, Settings

logger = logging.getLogger(__name__)

HEAD_START_TIMEOUT_SECONDS = 90.0
HEAD_STOP_TIMEOUT_SECONDS = 30.0
_POLL_SECONDS = 0.1


class HeadStartFailed(EngineStartFailed):
    code = "cluster_head_failed"


@dataclass(frozen=True)
class HeadRecord:
    """A head this data directory started: where it listens, its process, its log."""

    address: str
    pid: int
    log_path: str
    gpus: int
    reused: bool = False

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data.pop("reused")
        return data


def _reachable(address: str, timeout_seconds: float = 2.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_seconds):
            return True
    except (OSError, ValueError):
        return False


def _is_our_head(pid: int) -> bool:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    ray = any(part.endswith(b"ray") or part == b"ray.scripts.scripts" for part in command)
    return ray and b"start" in command and b"--head" in command


def recorded_head(settings: Settings) -> HeadRecord | None:
    """The head recorded in the data directory, if its process still runs and answers."""
    try:
        data = json.loads(settings.cluster_head_file.read_text())
        record = HeadRecord(
            address=str(data["address"]),
            pid=int(data["pid"]),
            log_path=str(data["log_path"]),
            gpus=int(data["gpus"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if _is_our_head(record.pid) and _reachable(record.address):
        return HeadRecord(record.address, record.pid, record.log_path, record.gpus, reused=True)
    return None


def check_head_ports(settings: Settings) -> None:
    """Before anything starts: ``--ray-port`` and ``--engine-ports`` apart from the ports Ray's
    processes take on this host (``InvalidInput`` naming the range and the flag to change)."""
    taken = ray_ports(settings.ray_head_arguments, head=True)
    port = settings.ray_port
    for what, ports in taken.items():
        if port not in ports:
            continue
        if ports.size > 1:
            below = f" (Ray's default {DEFAULT_RAY_PORT})" if DEFAULT_RAY_PORT not in ports else ""
            moved = PortRange(20000, 29999) if port < 20000 else RAY_WORKER_PORTS
            hint = (
                f"give --ray-port outside {ports}{below}, or move Ray's workers with "
                f"--ray-head-arg=--min-worker-port={moved.first} "
                f"--ray-head-arg=--max-worker-port={moved.last}"
            )
        else:
            hint = f"give another --ray-port (Ray's default is {DEFAULT_RAY_PORT})"
        raise InvalidInput(f"--ray-port {port} is taken by {what}: {ports}", hint=hint)
    if port == settings.port:
        raise InvalidInput(
            f"--ray-port {port} is the server's own --port",
            hint=f"give another --ray-port (e.g. {DEFAULT_RAY_PORT})",
        )
    if settings.engine_ports is not None:
        check_apart(
            settings.engine_ports,
            {
                **taken,
                "the Ray head's port (--ray-port)": PortRange(port, port),
                "the server's --port": PortRange(settings.port, settings.port),
            },
        )


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def head_labels(settings: Settings, docker: DockerCapability) -> dict[str, str]:
    """The head node's labels: the host's name as the worker's, what its Docker can do, and the
    engine port range (``--engine-ports``)."""
    labels = {WORKER_LABEL: socket.gethostname(), **docker.labels()}
    if settings.engine_ports is not None:
        labels[ENGINE_PORTS_LABEL] = str(settings.engine_ports)
    return labels


def head_command(settings: Settings, gpus: int, docker: DockerCapability | None = None) -> list[str]:
    return [
        *ray_command(),
        "start",
        "--head",
        "--block",
        "--port",
        str(settings.ray_port),
        "--num-gpus",
        str(gpus),
        "--labels",
        labels_argument(head_labels(settings, docker or DockerCapability.detect())),
        "--include-dashboard",
        "false",
        "--disable-usage-stats",
        *(["--node-ip-address", settings.ray_node_ip] if settings.ray_node_ip else []),
        *check_ray_arguments(settings.ray_head_arguments, "--ray-head-arg"),
    ]


def start_head(settings: Settings, token: str, *, say: Callable[[str], None]) -> HeadRecord:
    """This host's head: the recorded one when it still runs, else a new one (blocks until Ray
    says it started; ``HeadStartFailed`` naming the cause and the log otherwise)."""
    existing = recorded_head(settings)
    if existing is not None:
        say(
            f"cluster: the Ray head started earlier runs at {existing.address} (pid {existing.pid}); using it"
        )
        return existing
    if _port_in_use(settings.ray_port):
        raise HeadStartFailed(
            f"port {settings.ray_port} (--ray-port) is in use on this host",
            hint=f"another Ray head (`ray status`), or another program (`ss -ltnp 'sport = "
            f":{settings.ray_port}'` names it): give another --ray-port, or use that head with "
            "--ray-address HOST:PORT",
        )
    inventory = read_gpu_inventory()
    gpus = len(inventory.gpus)
    log_path = settings.data_dir / "cluster-head.log"
    argv = head_command(settings, gpus)
    with open(log_path, "ab") as log_file:
        offset = log_file.tell()
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=ray_environment(token),
            start_new_session=True,
        )
    deadline = time.monotonic() + HEAD_START_TIMEOUT_SECONDS
    output = ""
    while time.monotonic() < deadline:
        output = _read_from(log_path, offset)
        if STARTED_LINE in output:
            break
        if process.poll() is not None:
            reason = failure_reason(output) or f"ray start exited with status {process.returncode}"
            raise HeadStartFailed(
                f"the Ray head did not start: {reason} (port {settings.ray_port}); ray start said:\n"
                f"{failure_lines(output)}\n(all of it in {log_path})",
                hint="a port Ray's processes need is taken: change it with --ray-port, or with "
                "--ray-head-arg=--OPTION=PORT for Ray's other ports (docs/clusters.md, ports and firewalls)"
                if "port" in reason
                else "see the lines above; run `ray start --head` by hand to see the whole of it",
            )
        time.sleep(_POLL_SECONDS)
    else:
        _terminate(process.pid)
        raise HeadStartFailed(
            f"the Ray head did not start within {HEAD_START_TIMEOUT_SECONDS:.0f} s (log {log_path})",
            hint="see the log; a slow or overloaded host may need a second try",
        )
    address = f"{node_ip_of(output) or '127.0.0.1'}:{settings.ray_port}"
    record = HeadRecord(address=address, pid=process.pid, log_path=str(log_path), gpus=gpus)
    descriptor = os.open(settings.cluster_head_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump(record.to_json(), handle)
    say(f"cluster: Ray head started at {address} with {gpus} GPU(s) (pid {process.pid}, log {log_path})")
    return record


def _read_from(path: Path, offset: int) -> str:
    with open(path, "rb") as log_file:
        log_file.seek(offset)
        return log_file.read().decode(errors="replace")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours (not yet reaped) is gone for our purpose.
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    return True


def _terminate(pid: int, timeout_seconds: float = HEAD_STOP_TIMEOUT_SECONDS) -> None:
    """SIGTERM (``ray start --block`` stops its node's processes), then SIGKILL of its session."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(_POLL_SECONDS)
    if _alive(pid):
        logger.warning("the Ray head (pid %s) did not stop within %.0f s; killing it", pid, timeout_seconds)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def stop_head(settings: Settings, record: HeadRecord) -> None:
    """Stop the head and forget its record."""
    _terminate(record.pid)
    with contextlib.suppress(FileNotFoundError):
        settings.cluster_head_file.unlink()
