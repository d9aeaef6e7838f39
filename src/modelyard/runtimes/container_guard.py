"""The guard of a container a Ray supervisor started: it removes the container when the
supervisor dies.

A container is a child of its node's dockerd, not of the supervisor, so the parent-death
signal that ends an engine process with its supervisor cannot reach it. The supervisor starts
this guard as its child, with ``PR_SET_PDEATHSIG`` set to SIGTERM and SIGTERM blocked
(``guard_preexec``, before exec); the guard waits for that signal and then runs ``docker rm
--force NAME``. A supervisor that stops its container itself kills the guard with SIGKILL
first (nothing left to remove). A host that dies whole takes the guard with it; its dockerd
removes the container when it starts again (``docker run --rm``).

Usage (what the supervisor runs)::

    python -m modelyard.runtimes.container_guard docker modelyard-chat-0-1-1a2b3c4d 4242
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys

_PR_SET_PDEATHSIG = 1
REMOVE_TIMEOUT_SECONDS = 60.0


def guard_preexec() -> None:  # pragma: no cover - runs in the child between fork and exec
    """SIGTERM when the parent dies, and held (blocked) until the guard waits for it."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def remove_container(docker: str, name: str) -> None:
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(
            [docker, "rm", "--force", name],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=REMOVE_TIMEOUT_SECONDS,
            check=False,
        )


def main(arguments: list[str]) -> int:
    if len(arguments) != 3:
        print("usage: python -m modelyard.runtimes.container_guard DOCKER NAME PARENT_PID", file=sys.stderr)
        return 2
    docker, name, parent = arguments
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    # The parent may have died before the death signal was armed.
    if os.getppid() != int(parent):
        remove_container(docker, name)
        return 0
    signal.sigwait({signal.SIGTERM})
    remove_container(docker, name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
