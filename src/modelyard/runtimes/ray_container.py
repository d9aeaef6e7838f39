"""One engine container on a Ray node, as its supervisor (``ray_supervisor.py``) runs it through
that node's Docker engine.

The ``docker run`` argv is the Docker runtime's (``docker.docker_run_arguments``: name, labels,
read-only model mount, ``--gpus`` from the placement, ``--env NAME`` with the values in the CLI's
environment), built on the server and run here with two differences that a host without a
server beside it needs:

- attached, not ``--detach``: the CLI is the supervisor's child (it dies with it), its output is
  the container's (written to the rank's log file, which the server copies) and its exit code is
  the container's (137: killed by SIGKILL; ``--init`` makes 128+N the engine's signal N);
- ``--rm``: dockerd removes the container when it ends, and when it starts again after its host
  died (a container of a crashed host is not left behind), plus ``--cidfile``, which tells the
  supervisor the container exists.

The image is made ready first (``pull_image_on_this_node``, a Ray task pinned to the node): the
version's pull policy, against the same dockerd the CLI talks to (``DOCKER_HOST`` of the node's
Ray processes, else the default socket), with the registry credential the server opened and
handed over (a ``RegistryAuth``: its password is in no repr, argv or log line).

Orphans: the guard (``container_guard.py``) removes the container when the supervisor dies (it
is left running after a stop: its ``docker rm`` then finds nothing).

Usage (inside the supervisor actor)::

    container = NodeContainer("modelyard-chat-0-1-1a2b3c4d", log_path)
    answer = await container.start(argv, env)   # {"error": None} or {"error": ..., "hint": ...}
    container.status()                          # None while it runs, else (exit code, signal)
    await container.stop(grace_seconds=10)
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from modelyard.backends.spec import PullPolicy
from modelyard.errors import ImagePullFailed, ModelyardError
from modelyard.runtimes.docker import container_environment
from modelyard.runtimes.docker_cli import DockerCli, DockerCliError, hint_for, meaningful_line
from modelyard.runtimes.image_pull import (
    DockerDaemon,
    PullProgress,
    PullResult,
    RegistryAuth,
    image_present,
    prepare_image,
)

CREATE_TIMEOUT_SECONDS = 120.0
EXIT_AFTER_STOP_SECONDS = 30.0
LOG_TAIL_BYTES = 8192
# A pull's progress goes back to the server at most this often.
PROGRESS_INTERVAL_SECONDS = 1.0
_PR_SET_PDEATHSIG = 1
_POLL_SECONDS = 0.05
GUARD_MODULE = "modelyard.runtimes.container_guard"


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def node_daemon() -> DockerDaemon:
    """The dockerd of this node: the one its ``docker`` CLI talks to (``DOCKER_HOST``)."""
    return DockerDaemon.from_docker_host(os.environ.get("DOCKER_HOST"))


def pull_image_on_this_node(
    image: str, policy: PullPolicy, auth: RegistryAuth | None
) -> Iterator[dict[str, Any]]:
    """Make ``image`` ready on this node's dockerd under ``policy`` (run as a Ray task pinned to
    the node, a streaming generator): ``{"pulling": True}`` when it pulls (the policy asks for a
    pull, or the image is missing), ``{"progress": PullProgress.to_json(), "text": ...}`` at
    most once per ``PROGRESS_INTERVAL_SECONDS`` while it pulls (and the latest before the end),
    then one last message:
    ``{"result": PullResult.to_json() or None (nothing pulled), "daemon": ...}``, or ``{"error":
    ..., "hint": ...}`` with the registry's answer (never an exception: its traceback would
    travel through Ray's logs)."""
    messages: queue.Queue[dict[str, Any]] = queue.Queue()
    daemon = node_daemon()

    async def report(progress: PullProgress) -> None:
        messages.put({"progress": progress.to_json(), "text": progress.describe()})

    async def ready() -> PullResult | None:
        if policy == "always" or (policy == "if-missing" and not await image_present(image, daemon=daemon)):
            messages.put({"pulling": True})
        return await prepare_image(image, policy, daemon=daemon, auth=auth, on_progress=report)

    def pull() -> None:
        try:
            result = asyncio.run(ready())
        except ModelyardError as error:
            messages.put({"error": error.message, "hint": error.hint})
        except Exception as error:  # reported as this start's error, not a crashed task
            text = f"internal error while pulling image {image}: {type(error).__name__}: {error}"
            messages.put({"error": text, "hint": None})
        else:
            messages.put(
                {"result": None if result is None else result.to_json(), "daemon": daemon.describe()}
            )

    threading.Thread(target=pull, name=f"pull {image}", daemon=True).start()
    last_progress = -PROGRESS_INTERVAL_SECONDS
    held: dict[str, Any] | None = None  # the latest progress not sent yet
    while True:
        message = messages.get()
        if "pulling" in message:
            yield message
            continue
        if "progress" not in message:
            if held is not None:  # where the pull ended, before its result
                yield held
            yield message
            return
        held = message
        if time.monotonic() - last_progress >= PROGRESS_INTERVAL_SECONDS:
            last_progress = time.monotonic()
            held = None
            yield message


def worker_pull_failed(image: str, worker: str, answer: dict[str, Any]) -> ImagePullFailed:
    """The error of a pull that failed on ``worker`` (``answer``: the pull task's last message),
    naming the image, the worker and the registry's answer."""
    message, prefix = str(answer.get("error") or "the pull task said nothing"), f"cannot pull image {image}"
    if message.startswith(prefix):
        message = f"{prefix} on worker {worker}{message.removeprefix(prefix)}"
    else:
        message = f"{prefix} on worker {worker}: {message}"
    return ImagePullFailed(message, hint=answer.get("hint"))


def status_of_exit_code(code: int) -> tuple[int | None, int | None]:
    """(exit code, signal) of the attached CLI's exit code (128+N: killed by signal N)."""
    if code < 0:
        return (None, -code)
    if code > 128:
        return (None, code - 128)
    return (code, None)


class NodeContainer:
    """See the module docstring."""

    def __init__(self, name: str, log_path: Path) -> None:
        self.name = name
        self._log_path = log_path
        self._cid_file = log_path.parent / f"{name}.cid"
        self._cli: subprocess.Popen[bytes] | None = None
        self._docker = DockerCli()

    async def start(self, argv: list[str], env: dict[str, str]) -> dict[str, Any]:
        """Run ``argv`` (``docker run ...``) attached; returns once the container exists, or
        with Docker's own words and what to do when it could not be made."""
        self._docker = DockerCli(argv[0])
        executable = self._docker.executable
        run = [executable, "run", "--rm", "--cidfile", str(self._cid_file), *argv[2:]]
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        self._cid_file.unlink(missing_ok=True)
        # The guard first: a supervisor that dies from here on leaves no container. It returns
        # once it watches this process (it goes on as a process of its own).
        guard = subprocess.Popen(
            [sys.executable, "-m", GUARD_MODULE, executable, self.name, str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        await asyncio.to_thread(guard.wait)
        with open(self._log_path, "ab") as log_file:
            start_offset = log_file.tell()
            try:
                self._cli = subprocess.Popen(
                    run,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=container_environment(env, os.environ),
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )
            except OSError as error:
                message = f"the Docker CLI {executable!r} cannot run here: {error}"
                log_file.write(f"{message}\n".encode())
                return {"error": message, "hint": "install Docker on this worker (Debian: docker.io)"}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CREATE_TIMEOUT_SECONDS
        while not self._created() and self._cli.poll() is None and loop.time() < deadline:
            await asyncio.sleep(_POLL_SECONDS)
        if self._created():
            return {"error": None}
        if self._cli.poll() is None:
            await self._remove()
            message = f"docker run made no container within {CREATE_TIMEOUT_SECONDS:.0f} s"
            return {"error": message, "hint": "check that dockerd on this worker is healthy (`docker info`)"}
        text = self._log_since(start_offset)
        await self._remove()
        return {"error": meaningful_line(text), "hint": hint_for(text), "host": socket.gethostname()}

    def _created(self) -> bool:
        try:
            return bool(self._cid_file.read_text().strip())
        except OSError:
            return False

    def _log_since(self, offset: int) -> str:
        with open(self._log_path, "rb") as log_file:
            log_file.seek(offset)
            return log_file.read(LOG_TAIL_BYTES).decode(errors="replace")

    def status(self) -> tuple[int | None, int | None] | None:
        """None while the container runs; (exit code, signal) once it ended."""
        if self._cli is None:
            return (127, None)
        code = self._cli.poll()
        return None if code is None else status_of_exit_code(code)

    async def stop(self, grace_seconds: float) -> tuple[int | None, int | None] | None:
        """``docker stop`` with the grace period (SIGTERM, then SIGKILL), then make sure it is gone."""
        cli = self._cli
        if cli is not None and cli.poll() is None:
            with contextlib.suppress(DockerCliError):
                await self._docker.run(["stop", "--time", str(max(0, round(grace_seconds))), self.name])
            loop = asyncio.get_running_loop()
            deadline = loop.time() + EXIT_AFTER_STOP_SECONDS
            while cli.poll() is None and loop.time() < deadline:
                await asyncio.sleep(_POLL_SECONDS)
        status = self.status()
        await self._remove()
        return status

    async def _remove(self) -> None:
        """Nothing of the container left: removed (if still there), its CLI reaped."""
        with contextlib.suppress(DockerCliError):
            await self._docker.run(["rm", "--force", self.name])
        cli = self._cli
        if cli is not None and cli.poll() is None:
            cli.kill()
        if cli is not None:
            await asyncio.to_thread(cli.wait)
        self._cid_file.unlink(missing_ok=True)
