"""``modelyard worker join``: this host becomes a node of a modelyard cluster.

It checks what can be checked before Ray starts (the head's address, the token, the engine port
range, that the head answers on its port, this host's GPUs through NVML, and what its Docker can
do: ``docker info``), then runs ``ray start --address HEAD --block`` with the token in its
environment, this host's GPUs (``--num-gpus``), and the labels: ``modelyard.io/worker`` = the
worker's name, ``modelyard.io/docker`` and ``modelyard.io/docker-gpus`` (``docker_capability.py``),
``modelyard.io/engine-ports`` with ``--engine-ports``, plus the ``--label``s. The command stays in the
foreground while the host is in the cluster: stopping it (Ctrl-C, SIGTERM, or its own death:
``ray start`` gets SIGTERM then) takes the node out, and the server marks it lost and places its
replicas elsewhere. Ray's own output goes to stderr with ``--verbose``; its failures are read and
told in words that say what to do.

Usage::

    plan = plan_join("10.0.0.5:6379", token, name="gpu-2", labels={"zone": "a"}, gpus=None)
    raise SystemExit(run_join(plan, say=print))
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import socket
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

from modelyard.cluster.ray_processes import (
    STARTED_LINE,
    check_ray_arguments,
    failure_reason,
    labels_argument,
    ray_command,
    ray_environment,
    ray_ports,
)
from modelyard.cluster.token import check_token
from modelyard.errors import EngineStartFailed, InvalidInput
from modelyard.hardware.gpus import read_gpu_inventory
from modelyard.runtimes.docker_capability import DockerCapability
from modelyard.runtimes.engine_ports import ENGINE_PORTS_LABEL, PortRange, check_apart, parse_port_range
from modelyard.runtimes.ray_names import WORKER_LABEL
from modelyard.settings import DEFAULT_RAY_PORT

REACH_TIMEOUT_SECONDS = 5.0
# After Ctrl-C / SIGTERM, how long ray start may take to stop its node (longer when the head is
# gone already: the raylet tries to say goodbye) before it is killed.
LEAVE_GRACE_SECONDS = 30.0
OUTPUT_TAIL_LINES = 20
_PR_SET_PDEATHSIG = 1


class JoinFailed(EngineStartFailed):
    code = "join_failed"


@dataclass(frozen=True)
class JoinPlan:
    head_host: str
    head_port: int
    name: str
    gpus: int
    labels: dict[str, str]
    token: str = field(repr=False)
    # Why the GPU count is what it is ("2 GPUs read by NVML", "--num-gpus 4").
    gpus_source: str = ""
    # This host's address that the head and the other hosts reach; None: Ray's guess.
    node_ip: str | None = None
    # More options of ``ray start`` as given (``--node-manager-port=8076``, to fix ports for a firewall).
    ray_arguments: tuple[str, ...] = ()
    # ``--engine-ports``: every engine port on this host from this range; None: any free port.
    engine_ports: PortRange | None = None
    # What this host's Docker can do (None: not asked).
    docker: DockerCapability | None = None

    @property
    def head_address(self) -> str:
        return f"{self.head_host}:{self.head_port}"

    def node_labels(self) -> dict[str, str]:
        labels = {WORKER_LABEL: self.name, **(self.docker.labels() if self.docker else {})}
        if self.engine_ports is not None:
            labels[ENGINE_PORTS_LABEL] = str(self.engine_ports)
        return {**labels, **self.labels}

    def argv(self) -> list[str]:
        return [
            *ray_command(),
            "start",
            "--address",
            self.head_address,
            "--num-gpus",
            str(self.gpus),
            "--labels",
            labels_argument(self.node_labels()),
            "--disable-usage-stats",
            "--block",
            *(["--node-ip-address", self.node_ip] if self.node_ip else []),
            *self.ray_arguments,
        ]


def parse_head_address(text: str) -> tuple[str, int]:
    """``HOST[:PORT]`` of the head (port 6379 by default); URLs are refused with the reason."""
    value = text.strip()
    if value.startswith(("http://", "https://")):
        raise InvalidInput(
            f"{text!r} is a web address; join needs the Ray head's HOST:PORT",
            hint="give the address `modelyard serve --cluster` printed after `worker join` "
            f"(HOST:{DEFAULT_RAY_PORT}), not the console's URL",
        )
    value = value.removeprefix("ray://")
    host, separator, port_text = value.rpartition(":")
    if not separator:
        host, port_text = value, str(DEFAULT_RAY_PORT)
    host = host.strip("[]")
    if not host or any(character.isspace() or character in "/?#@" for character in host):
        raise InvalidInput(f"{text!r} is not HOST:PORT", hint=f"e.g. 10.0.0.5:{DEFAULT_RAY_PORT}")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise InvalidInput(
            f"the port in {text!r} is not a number from 1 to 65535", hint=f"e.g. {host}:{DEFAULT_RAY_PORT}"
        )
    return host, int(port_text)


def check_head_reachable(host: str, port: int, timeout_seconds: float = REACH_TIMEOUT_SECONDS) -> None:
    try:
        with socket.create_connection((host, port), timeout=timeout_seconds):
            return
    except socket.gaierror as error:
        raise JoinFailed(
            f"cannot resolve the head's host name {host!r}: {error.strerror}",
            hint="use the head's IP address, or fix this host's DNS / /etc/hosts",
        ) from None
    except OSError as error:
        cause = "no answer" if isinstance(error, TimeoutError) else (error.strerror or str(error))
        raise JoinFailed(
            f"cannot reach the cluster's head at {host}:{port} ({cause})",
            hint=f"is `modelyard serve --cluster` running there, on that port (--ray-port)? Is TCP {port} "
            "open in the firewalls between the hosts (docs/clusters.md lists the ports Ray needs)?",
        ) from None


def plan_join(
    address: str,
    token: str,
    *,
    name: str | None,
    labels: dict[str, str],
    gpus: int | None,
    token_source: str,
    node_ip: str | None = None,
    ray_arguments: tuple[str, ...] = (),
    engine_ports: str | None = None,
) -> JoinPlan:
    """Everything checked that can be before Ray starts (the head reached on its port)."""
    host, port = parse_head_address(address)
    token = check_token(token, token_source)
    ray_arguments = check_ray_arguments(ray_arguments)
    ports = None if engine_ports is None else parse_port_range(engine_ports, "--engine-ports")
    if ports is not None:
        check_apart(ports, ray_ports(ray_arguments, head=False))
    ray_command()  # Ray installed?
    check_head_reachable(host, port)
    if gpus is None:
        inventory = read_gpu_inventory()
        count = len(inventory.gpus)
        source = (
            f"{count} GPU(s) read by NVML"
            if count
            else f"no GPU read by NVML ({inventory.unavailable_reason})"
        )
    else:
        count, source = gpus, f"--num-gpus {gpus}"
    return JoinPlan(
        head_host=host,
        head_port=port,
        name=name or socket.gethostname(),
        gpus=count,
        labels=labels,
        token=token,
        gpus_source=source,
        node_ip=node_ip,
        ray_arguments=ray_arguments,
        engine_ports=ports,
        docker=DockerCapability.detect(),
    )


def docker_line(capability: DockerCapability | None) -> str:
    """What the join says of this host's Docker (the reason is shown here only: the server knows
    the state, not why)."""
    if capability is None:
        return "Docker: not asked"
    if capability.engine != "ready":
        return (
            f"Docker: {capability.summary()} ({capability.detail}): image backends will not be placed on "
            "this host (process backends will)"
        )
    if capability.gpus == "none":
        return (
            f"Docker: {capability.summary()} ({capability.detail}): image backends that need GPUs will not "
            "be placed on this host (install the NVIDIA Container Toolkit and join again)"
        )
    return f"Docker: {capability.summary()}"


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()


def run_join(plan: JoinPlan, *, say: Callable[[str], None], verbose: bool = False) -> int:
    """Run ``ray start`` until it ends; its exit status (0: the node left when asked to)."""
    process = subprocess.Popen(
        plan.argv(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=ray_environment(plan.token),
        preexec_fn=_die_with_parent,
    )
    leaving = False

    def leave(signal_number: int, frame: FrameType | None) -> None:
        nonlocal leaving
        if not leaving:
            timer = threading.Timer(LEAVE_GRACE_SECONDS, _kill, args=(process,))
            timer.daemon = True
            timer.start()
        leaving = True
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)

    previous = {number: signal.signal(number, leave) for number in (signal.SIGTERM, signal.SIGINT)}
    tail: deque[str] = deque(maxlen=OUTPUT_TAIL_LINES)
    joined = False
    try:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.decode(errors="replace").rstrip()
            tail.append(line)
            if verbose:
                print(line, file=sys.stderr, flush=True)
            if not joined and STARTED_LINE in line:
                joined = True
                say(
                    f"joined the cluster at {plan.head_address} as {plan.name!r} with {plan.gpus} GPU(s) "
                    f"({plan.gpus_source}); see it with `modelyard workers` on the server; Ctrl-C to leave"
                )
        code = process.wait()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if leaving or code == 0:
        say(f"{plan.name!r} left the cluster")
        return 0
    output = "\n".join(tail)
    reason = failure_reason(output)
    if reason == "the head refused the cluster token":
        raise JoinFailed(
            f"the head at {plan.head_address} refused the cluster token",
            hint="give the token of that cluster: a copy of the file <data-dir>/cluster-token on the head's "
            "host (--token-file), as `modelyard serve --cluster` says at its start",
        )
    if joined:
        raise JoinFailed(
            f"the node {plan.name!r} stopped (ray start exited with status {code}): "
            f"{reason or 'see below'}\n{output}",
            hint="the head may have stopped (a server that stops ends its cluster): join again once it runs",
        )
    raise JoinFailed(
        f"ray start failed with status {code}: {reason or 'its last lines follow'}\n{output}",
        hint="run again with --verbose for Ray's whole output",
    )
