"""What the head and the workers share about the ``ray start`` processes modelyard runs: where the
``ray`` command is, the environment that turns token authentication on, and how to read what
``ray start`` printed (the node's address, the reason it failed).

Ray is not imported here: these are child processes, and ``--help`` of our commands must not
pay for Ray's import.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys

from modelyard.errors import InvalidInput
from modelyard.runtimes.engine_ports import PortRange

INSTALL_HINT = "pip install 'modelyard[ray]' (on the server and on every worker, the same Ray version)"
STARTED_LINE = "Ray runtime started"
_NODE_IP = re.compile(r"Local node IP: (\S+)")
# What ``ray start`` prints when the head refused the token, or when it has no token at all.
AUTH_FAILURE_MARKERS = ("InvalidAuthToken", "AuthenticationError", "Authentication token")
PORT_IN_USE_MARKERS = ("already in use", "Address already in use", "port conflicts")
_PORT_CLASH = re.compile(r"Ray component (\w+) is trying to use a port number (\d+) that is used by other")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_.]*(Error|Exception): ")
# The lines of a failed ``ray start``'s output shown in the error (the rest is in its log).
FAILURE_LINES = 6
# The ports a Ray node takes unless ``ray start`` is told otherwise (ray start --help): its
# workers' range, and the dashboard agent's HTTP port; a head also the Ray Client server's.
RAY_WORKER_PORTS = PortRange(10002, 19999)
RAY_DASHBOARD_AGENT_PORT = 52365
RAY_CLIENT_SERVER_PORT = 10001


def ray_command() -> list[str]:
    """``ray`` of this Python (its CLI as a module: the same Ray as the server's, also when Ray
    was installed with ``pip --target`` and its ``ray`` script is on no PATH)."""
    if importlib.util.find_spec("ray") is None:
        raise InvalidInput("Ray is not installed, and clusters run on Ray", hint=INSTALL_HINT)
    return [sys.executable, "-m", "ray.scripts.scripts"]


def ray_environment(token: str) -> dict[str, str]:
    """This process's environment with Ray's token authentication on (the token in an
    environment variable, never in an argv that ``ps`` shows)."""
    return {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}


def node_ip_of(output: str) -> str | None:
    """The address ``ray start`` chose for its node ("Local node IP: 10.0.0.5")."""
    match = _NODE_IP.search(output)
    return match.group(1) if match else None


def failure_reason(output: str) -> str | None:
    """What went wrong, read from ``ray start``'s output, in words that say what to do."""
    if any(marker in output for marker in AUTH_FAILURE_MARKERS):
        return "the head refused the cluster token"
    if any(marker in output for marker in PORT_IN_USE_MARKERS):
        return "a port Ray needs is in use on this host"
    clash = _PORT_CLASH.search(output)
    if clash:
        component = clash.group(1).replace("_", " ")
        return f"Ray's {component} would take port {clash.group(2)}, which another of its parts has"
    if "is already running at" in output:
        return "a Ray head already runs on this port of this host"
    if "Multi-node Ray clusters are not supported" in output:
        return "Ray is set to stay on one host here (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0); unset it"
    return None


def failure_lines(output: str) -> str:
    """What to show of a failed ``ray start``'s output: from its last exception line to the
    end, else its last lines (at most ``FAILURE_LINES``, each cut to 300 characters)."""
    lines = [line.rstrip() for line in output.splitlines() if line.strip()]
    starts = [index for index, line in enumerate(lines) if _EXCEPTION_LINE.match(line.strip())]
    shown = lines[starts[-1] :] if starts else lines
    return "\n".join(f"    {line[:300]}" for line in shown[-FAILURE_LINES:])


def ray_ports(arguments: tuple[str, ...], *, head: bool) -> dict[str, PortRange]:
    """The ports a Ray node started with ``arguments`` (more options of ``ray start``) takes on
    this host, by what takes them (``--ray-port`` is the caller's to add)."""
    options: dict[str, str] = {}
    for argument in arguments:
        name, separator, value = argument.partition("=")
        if separator:
            options[name] = value
    taken: dict[str, PortRange] = {}
    if "--worker-port-list" in options:
        for text in options["--worker-port-list"].split(","):
            if text.strip().isdigit():
                taken[f"Ray's worker port (--worker-port-list) {text.strip()}"] = PortRange(
                    int(text), int(text)
                )
    else:
        first = options.get("--min-worker-port", str(RAY_WORKER_PORTS.first))
        last = options.get("--max-worker-port", str(RAY_WORKER_PORTS.last))
        if first.isdigit() and last.isdigit() and 0 < int(first) <= int(last):
            taken["Ray's worker ports (ray start --min-worker-port/--max-worker-port)"] = PortRange(
                int(first), int(last)
            )
    for name, value in options.items():
        if (
            name.endswith("-port")
            and name not in ("--min-worker-port", "--max-worker-port")
            and value.isdigit()
        ):
            taken[f"Ray's {name}"] = PortRange(int(value), int(value))
    if "--dashboard-agent-listen-port" not in options:
        taken["Ray's dashboard agent"] = PortRange(RAY_DASHBOARD_AGENT_PORT, RAY_DASHBOARD_AGENT_PORT)
    if head and "--ray-client-server-port" not in options:
        taken["Ray's client server"] = PortRange(RAY_CLIENT_SERVER_PORT, RAY_CLIENT_SERVER_PORT)
    return taken


def labels_argument(labels: dict[str, str]) -> str:
    """``--labels`` of ``ray start``: ``key=value,key=value``."""
    return ",".join(f"{key}={value}" for key, value in labels.items())


def parse_labels(items: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` items (``--label zone=a``) as a mapping, each one checked."""
    labels: dict[str, str] = {}
    for item in items:
        key, separator, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not separator or not key or not value or "," in item or any(c.isspace() for c in item):
            raise InvalidInput(
                f"label {item!r} is not KEY=VALUE",
                hint="e.g. --label zone=a --label gpu=l40s (no commas, no blanks)",
            )
        if key.startswith("ray.io/"):
            raise InvalidInput(f"label {key!r} is Ray's own", hint="use a key outside ray.io/, e.g. zone")
        if key.startswith("modelyard.io/"):
            raise InvalidInput(
                f"label {key!r} is modelyard's own (set from --name, --engine-ports and what the join "
                "finds of Docker)",
                hint="use a key outside modelyard.io/, e.g. zone",
            )
        labels[key] = value
    return labels


# What modelyard sets itself, from its own options: not to be given again.
_OWN_RAY_OPTIONS = ("--address", "--num-gpus", "--labels", "--block", "--node-ip-address", "--head", "--port")


def check_ray_arguments(arguments: tuple[str, ...], flag: str = "--ray-arg") -> tuple[str, ...]:
    """``--ray-arg`` (join) / ``--ray-head-arg`` (serve) values: options of ``ray start``, none
    of those modelyard sets from its own options."""
    for argument in arguments:
        if not argument.startswith("--"):
            raise InvalidInput(
                f"{flag} {argument!r} is not an option of ray start",
                hint=f"give each as {flag}=--OPTION=VALUE, e.g. {flag}=--node-manager-port=8076",
            )
        name = argument.split("=", 1)[0]
        if name in _OWN_RAY_OPTIONS:
            raise InvalidInput(
                f"{flag} {name} is set by modelyard itself",
                hint="use modelyard's own options for these (worker join: the address, --num-gpus, --label, "
                "--node-ip; serve: --ray-port, --ray-node-ip)",
            )
    return arguments
