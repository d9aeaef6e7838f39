"""The supervisor of one rank of an engine, run as a Ray actor on the rank's node.

The Ray runtime (``ray_runtime.py``) creates one detached, named actor of this class per rank,
inside the replica's placement group. The actor starts the engine as a child process of its
node (its own session, so a stop reaches the engine's children), with the identity markers of
the process runtime in its environment, writes the engine's output to a file on its node and
hands that file out in chunks (``read_log``), which the server copies into the per-start log.
The actor outlives the server that created it (detached), so a restarted server finds it by
name and takes the engine back. The engine dies with its actor (``PR_SET_PDEATHSIG``): a
supervisor that is gone never leaves an engine behind on its node.

An image backend's rank is a container instead (``start_container``): the same ``docker run`` as
the Docker runtime's, run through this node's Docker engine by ``ray_container.NodeContainer``
(attached, ``--rm``, with a guard that removes the container when the supervisor dies).

All methods are ``async`` and run on the actor's one event-loop thread, the thread that started
the engine (the parent-death signal is tied to it).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from modelyard.runtimes.base import EngineIdentity, ExitStatus, SignalTarget
from modelyard.runtimes.engine_environment import ENV_RUNTIME, engine_environment
from modelyard.runtimes.engine_ports import NoFreeEnginePort, PortRange, pick_port
from modelyard.runtimes.ray_container import NodeContainer

ENV_RANK = "MODELYARD_RANK"
LOG_CHUNK_BYTES = 1 << 20
_PR_SET_PDEATHSIG = 1
_POLL_SECONDS = 0.05


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def engine_log_folder() -> Path:
    """Where supervisors on this node keep their engines' output until the server copied it."""
    return Path(tempfile.gettempdir()) / "modelyard-engines"


def model_directory_problem(path: str) -> str | None:
    """What is wrong with the model directory ``path`` on this node (run as a Ray task pinned to
    the node, with the doctor's own inspection: ``modeldir.inspect_model_directory``); None: servable."""
    from modelyard.modeldir import inspect_model_directory

    directory = Path(path)
    if not directory.is_dir():
        return f"{path} does not exist" if not directory.exists() else f"{path} is not a directory"
    report = inspect_model_directory(directory)
    if report.valid:
        return None
    return "; ".join(report.reasons) or "it is not a servable model directory"


def model_directory_missing(path: str) -> str | None:
    """Whether ``path`` is a directory on this node (run as a Ray task before an engine starts
    there: the engine reads its weights on its own node); None: it is."""
    directory = Path(path)
    if directory.is_dir():
        return None
    return f"{path} does not exist" if not directory.exists() else f"{path} is not a directory"


def free_port_on_this_node(host: str, ports: tuple[int, int] | None, held: list[int]) -> int | None:
    """A port nothing listens on now on this node (run as a Ray task on the node): any without
    ``ports``, else the first of that range (both ends included) not in ``held``; None when the
    range is full."""
    chosen = None if ports is None else PortRange(*ports)
    try:
        return pick_port(host, chosen, held=set(held), where="this node")
    except NoFreeEnginePort:
        return None


def exit_status_of(answer: tuple[int | None, int | None] | list[int | None] | None) -> ExitStatus | None:
    """A supervisor's ``status``/``stop`` answer (exit code, signal) as an ``ExitStatus``."""
    if answer is None:
        return None
    code, signal_number = answer
    return ExitStatus(exit_code=code, signal_number=signal_number)


def gang_end(answers: list[Any], ranks: int) -> ExitStatus:
    """How a stopped gang ended: the first rank's status its supervisor's ``stop`` gave back."""
    for rank, answer in enumerate(answers):
        if isinstance(answer, (tuple, list)) and (status := exit_status_of(answer)) is not None:
            return ExitStatus(status.exit_code, status.signal_number, f"rank {rank}" if ranks > 1 else "")
    return ExitStatus(exit_code=None, signal_number=None, detail="stopped")


class EngineSupervisor:
    """One rank: ``start`` it, ask its ``status``, copy its log with ``read_log``, ``stop`` it."""

    def __init__(self, identity: dict[str, Any], rank: int) -> None:
        self._identity = identity
        self._rank = rank
        self._child: subprocess.Popen[bytes] | None = None
        self._status: tuple[int | None, int | None] | None = None
        self._log_path = engine_log_folder() / str(identity["launch_token"]) / f"rank-{rank}.log"
        # How far the server has copied the log (the offset it last asked for).
        self._copied_bytes = 0
        self._start_error: str | None = None
        self._container: NodeContainer | None = None
        # Where a stop's SIGTERM goes (the start says; the supervisor outlives the server).
        self._stop_signal_target: SignalTarget = "group"

    async def start(
        self, argv: list[str], env: dict[str, str], working_directory: str, stop_signal_target: SignalTarget
    ) -> dict[str, Any]:
        """Launch the engine; returns its pid and this node's address, or the launch error.
        ``stop_signal_target``: where ``stop``'s SIGTERM goes (its process group, or the launcher)."""
        identity = EngineIdentity(**self._identity)
        self._stop_signal_target = stop_signal_target
        environment = {
            **os.environ,
            **env,
            **engine_environment(identity, stop_signal_target),
            ENV_RANK: str(self._rank),
            # Not the process runtime's (it scans this host's processes for the same markers).
            ENV_RUNTIME: "ray",
        }
        # The Ray worker's own variables would make the engine think it is a Ray worker.
        for name in [name for name in environment if name.startswith("RAY_") and name not in env]:
            environment.pop(name)
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._log_path, "ab") as log_file:
            try:
                Path(working_directory).mkdir(parents=True, exist_ok=True)
                self._child = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=environment,
                    cwd=working_directory,
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )
            except (OSError, ValueError) as error:
                self._start_error = f"{type(error).__name__}: {error}"
                log_file.write(f"cannot launch {argv[0] if argv else ''!r}: {error}\n".encode())
                return {"error": self._start_error, "not_found": isinstance(error, FileNotFoundError)}
        return {"pid": self._child.pid, "error": None}

    async def start_container(self, argv: list[str], env: dict[str, str], name: str) -> dict[str, Any]:
        """Run the container ``name`` (``argv``: the Docker runtime's ``docker run``) through this
        node's Docker engine; returns once it exists, or Docker's words and what to do."""
        self._container = NodeContainer(name, self._log_path)
        answer = await self._container.start(argv, env)
        if answer.get("error"):
            self._start_error = str(answer["error"])
        return answer

    async def identity(self) -> dict[str, Any]:
        return {**self._identity, "rank": self._rank}

    async def pid(self) -> int | None:
        """The engine's pid on this node (None for a container: it is dockerd's child)."""
        return self._child.pid if self._child is not None else None

    async def container_name(self) -> str | None:
        return self._container.name if self._container is not None else None

    async def status(self) -> tuple[int | None, int | None] | None:
        """None while the engine runs; (exit code, signal) once it ended."""
        if self._status is not None:
            return self._status
        if self._container is not None:
            self._status = self._container.status()
            return self._status
        if self._child is None:
            return (127, None) if self._start_error else None
        code = self._child.poll()
        if code is None:
            return None
        self._status = (None, -code) if code < 0 else (code, None)
        return self._status

    async def copied_bytes(self) -> int:
        return self._copied_bytes

    async def read_log(self, offset: int) -> bytes:
        """The log from ``offset`` (up to 1 MiB); asking for ``offset`` says all before it is copied."""
        self._copied_bytes = max(self._copied_bytes, offset)
        try:
            with open(self._log_path, "rb") as log_file:
                log_file.seek(offset)
                return log_file.read(LOG_CHUNK_BYTES)
        except FileNotFoundError:
            return b""

    async def stop(self, grace_seconds: float) -> tuple[int | None, int | None] | None:
        """SIGTERM (the launcher or its process group, as the start said), up to
        ``grace_seconds``, then SIGKILL of the group."""
        if self._container is not None:
            self._status = await self._container.stop(grace_seconds)
            return self._status
        child = self._child
        if child is None:
            return await self.status()
        group = child.pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self._stop_signal_target == "launcher" and child.poll() is None:
                os.kill(child.pid, signal.SIGTERM)
            else:
                os.killpg(group, signal.SIGTERM)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_seconds
        while loop.time() < deadline and (child.poll() is None or _group_alive(group)):
            await asyncio.sleep(_POLL_SECONDS)
        if child.poll() is None or _group_alive(group):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
            for _ in range(100):
                if child.poll() is not None and not _group_alive(group):
                    break
                await asyncio.sleep(_POLL_SECONDS)
        return await self.status()

    async def forget_log(self) -> None:
        """The server has the whole log: remove this node's copy."""
        with contextlib.suppress(OSError):
            self._log_path.unlink()
            self._log_path.parent.rmdir()


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


__all__ = [
    "ENV_RANK",
    "EngineSupervisor",
    "free_port_on_this_node",
    "model_directory_missing",
    "model_directory_problem",
]
