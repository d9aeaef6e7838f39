"""The guard of a container a Ray supervisor started: it removes the container when the
supervisor dies.

A container is a child of its node's dockerd, not of the supervisor, so the parent-death
signal that ends an engine process with its supervisor cannot reach it. The supervisor starts
this guard in a session of its own; the guard opens a pidfd of the supervisor, then leaves the
supervisor's children (it forks, and the first process exits: Ray kills a dead worker's
children at once, with SIGKILL, and the guard must outlive it), waits until that pidfd says the
supervisor ended, and runs ``docker rm --force NAME``. A supervisor that stopped its container
itself leaves the guard be: its ``docker rm`` then finds nothing. A host that dies whole takes
the guard with it; its dockerd removes the container when it starts again (``docker run --rm``).

Usage (what the supervisor runs; it returns once the guard watches)::

    python -m modelyard.runtimes.container_guard docker modelyard-chat-0-1-1a2b3c4d 4242
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys

REMOVE_TIMEOUT_SECONDS = 60.0


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
    try:
        watched = os.pidfd_open(int(parent))
    except ProcessLookupError:
        remove_container(docker, name)
        return 0
    if os.getppid() != int(parent):  # the supervisor died before the pidfd was open
        remove_container(docker, name)
        return 0
    if os.fork() > 0:
        os._exit(0)  # the supervisor reaps this one; the guard goes on in the child
    select.select([watched], [], [])  # readable once the supervisor has ended
    remove_container(docker, name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
