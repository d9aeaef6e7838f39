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

INSTALL_HINT = "pip install 'modelyard[ray]' (on the server and on every worker, the same Ray version)"
STARTED_LINE = "Ray runtime started"
_NODE_IP = re.compile(r"Local node IP: (\S+)")
# What ``ray start`` prints when the head refused the token, or when it has no token at all.
AUTH_FAILURE_MARKERS = ("InvalidAuthToken", "AuthenticationError", "Authentication token")
PORT_IN_USE_MARKERS = ("already in use", "Address already in use", "port conflicts")


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
    if "Multi-node Ray clusters are not supported" in output:
        return "Ray is set to stay on one host here (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0); unset it"
    return None


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
