"""Engines as child processes of this host, each in its own process group (session).

The launcher's pid is also its process group id (``start_new_session=True``), so a stop reaches
every process the engine spawned (vLLM's engine core, SGLang's scheduler and detokenizer), and
``os.killpg`` still works after the launcher itself is gone. Every engine carries its identity in
its environment (``MODELYARD_ENGINE_OWNER``, ``MODELYARD_LAUNCH_TOKEN``, ...), inherited by all
its children, so a restarted server finds each engine it ever launched by reading
``/proc/<pid>/environ``, even one whose pid was never written down. Engines outlive a killed
server on purpose; the next server re-adopts them. The handle's id is ``"<pid>:<start time>"``:
the start time tells a re-used pid apart from the engine it once was. Only this module reads it
(``host_process`` gives the pid and start time to whoever shows them). A stop sends SIGTERM where
the engine's ``MODELYARD_STOP_SIGNAL_TARGET`` says (``engine_environment.py``: its process group,
or its launcher alone), waits up to the grace period, then SIGKILLs the group.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

from modelyard.errors import EngineStartFailed
from modelyard.runtimes.base import (
    EngineAddress,
    EngineHandle,
    EngineIdentity,
    ExitStatus,
    FoundEngine,
    LaunchSpec,
    Mount,
    RuntimeKind,
    SignalTarget,
    StartedEngine,
    refuse_gangs,
)
from modelyard.runtimes.engine_environment import (
    ENV_MARKERS,
    ENV_OWNER,
    ENV_RUNTIME,
    engine_environment,
    stop_signal_target_of,
)
from modelyard.runtimes.engine_ports import PortBook, PortRange, pick_port
from modelyard.runtimes.exit_memo import ExitMemo
from modelyard.runtimes.host_addresses import THIS_HOST, reachable_host
from modelyard.runtimes.log_files import open_engine_log, shown_command
from modelyard.runtimes.redacted_output import start_redactor

logger = logging.getLogger(__name__)

# Start times of the same process read twice differ by rounding only.
_START_TIME_TOLERANCE_SECONDS = 1.0
_POLL_INTERVAL_SECONDS = 0.05
_KILL_WAIT_POLLS = 100
# How long a start waits for the kernel to finish the engine's exec (microseconds, normally).
_EXEC_WAIT_SECONDS = 5.0
_EXEC_POLL_INTERVAL_SECONDS = 0.001


def _group_members(process_group_id: int) -> list[psutil.Process]:
    members = []
    for candidate in psutil.process_iter(["pid", "status"]):
        try:
            if candidate.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if os.getpgid(candidate.pid) == process_group_id:
                members.append(candidate)
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            continue
    return members


def _wait_until_exec_is_done(child: subprocess.Popen[bytes]) -> None:
    """Return once the engine's environment can be read from ``/proc/<pid>/environ`` (or it has
    exited). ``Popen`` returns as soon as the kernel has replaced the child's memory in
    ``execve``, a moment before it lays out the new program's arguments and environment; a scan
    in between (a restarted server's ``find_engines``) reads an empty environment and misses the
    engine. Nothing signals the end of an exec, so this polls, for microseconds as a rule."""
    deadline = time.monotonic() + _EXEC_WAIT_SECONDS
    while time.monotonic() < deadline and child.poll() is None:
        try:
            if ENV_OWNER in psutil.Process(child.pid).environ():
                return
        except (psutil.Error, OSError):
            return  # gone already, or unreadable: the scan cannot read it either way
        time.sleep(_EXEC_POLL_INTERVAL_SECONDS)
    if child.poll() is None:
        logger.warning("engine pid %s: its environment was still unreadable after its start", child.pid)


def _parse_handle(handle: EngineHandle) -> tuple[int, float]:
    pid_text, _, start_text = handle.id.partition(":")
    try:
        return int(pid_text), float(start_text or 0.0)
    except ValueError as error:
        raise ValueError(f"not a process handle: {handle.id!r}") from error


def process_handle(pid: int, start_time: float) -> EngineHandle:
    return EngineHandle(runtime="process", id=f"{pid}:{start_time:.3f}", label=f"pid {pid}")


def _launch_error(error: OSError | ValueError, program: str) -> EngineStartFailed:
    if isinstance(error, ValueError):  # "embedded null byte"
        return EngineStartFailed(
            f"cannot launch: {error} in the command or its environment",
            hint="remove NUL bytes from the backend parameters and env",
        )
    if isinstance(error, FileNotFoundError):
        return EngineStartFailed(
            f"executable not found: {program!r}",
            hint="install the engine, or give the backend version the full path of its executable",
        )
    if isinstance(error, PermissionError):
        return EngineStartFailed(f"cannot execute {program!r}: permission denied", hint="chmod +x it")
    if error.errno == errno.E2BIG:
        return EngineStartFailed(
            "cannot launch: argument list too long (the backend parameters or env are larger than "
            "the kernel accepts)",
            hint="pass large values through files",
        )
    return EngineStartFailed(f"cannot launch {program!r}: {error.strerror or error}")


class ProcessRuntime:
    """Starts engines with ``subprocess.Popen``; see the module docstring."""

    def __init__(self, *, engine_ports: PortRange | None = None, exit_memo: ExitMemo | None = None) -> None:
        # ``serve --engine-ports``: every engine port on this host from this range.
        self._engine_ports = engine_ports
        self._ports = PortBook()
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        # Each redacting relay by its engine's pid, waited for once the engine is gone.
        self._redactors: dict[int, subprocess.Popen[bytes]] = {}
        # How reaped children ended (by handle id), so that every caller sees the same status.
        self._exited = exit_memo if exit_memo is not None else ExitMemo()

    @property
    def kind(self) -> RuntimeKind:
        return "process"

    def engine_model_path(self, model_path: str) -> str:
        return model_path

    def mounts(self, model_path: str) -> list[Mount]:
        return []

    async def allocate_address(self, worker_host: str, *, node_id: str | None = None) -> EngineAddress:
        port = pick_port(worker_host, self._engine_ports, held=self._ports.held(THIS_HOST), where=THIS_HOST)
        self._ports.hold(THIS_HOST, port)
        return EngineAddress(
            bind_host=worker_host, port=port, reach_host=reachable_host(worker_host), reach_port=port
        )

    async def start(self, spec: LaunchSpec) -> StartedEngine:
        refuse_gangs(spec, "process")
        return await asyncio.to_thread(self._start, spec)

    def _start(self, spec: LaunchSpec) -> StartedEngine:
        argv = [*spec.program, *spec.arguments]
        environment = {
            **os.environ,
            **spec.env,
            **engine_environment(spec.identity, spec.stop_signal_target),
        }
        with open_engine_log(spec.log_path) as log_file:
            try:
                spec.working_directory.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise EngineStartFailed(
                    f"cannot create the engine's working directory {spec.working_directory}: "
                    f"{error.strerror or error}",
                    hint="check the data directory's disk space and permissions",
                ) from error
            log_file.write(f"$ {shown_command(argv, spec.secrets)}\n".encode())
            log_file.flush()
            # With secrets, the engine writes to a pipe and the redactor masks them on the way.
            redactor = start_redactor(log_file, spec.secrets) if spec.secrets else None
            try:
                child = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file if redactor is None else redactor.engine_output,
                    stderr=subprocess.STDOUT,
                    env=environment,
                    cwd=spec.working_directory,
                    start_new_session=True,
                )
            except (OSError, ValueError) as error:
                failure = _launch_error(error, argv[0] if argv else "")
                if redactor is not None:
                    redactor.release()
                    redactor.relay.wait()
                log_file.write(f"{failure.message}\n".encode())
                raise failure from error
            if redactor is not None:
                redactor.release()  # the engine holds the pipe now; its end of file ends the relay
                self._redactors[child.pid] = redactor.relay
        self._children[child.pid] = child
        _wait_until_exec_is_done(child)
        try:
            start_time = psutil.Process(child.pid).create_time()
        except psutil.NoSuchProcess:
            start_time = 0.0
        logger.info("started engine pid %s: %s", child.pid, argv[0])
        handle = process_handle(child.pid, start_time)
        self._exited.forget(handle.id)
        self._ports.claim(THIS_HOST, spec.address.port, handle.id)
        return StartedEngine(handle=handle, command=argv)

    def host_process(self, handle: EngineHandle) -> tuple[int, float] | None:
        """The engine's launcher: its pid and start time (the handle's id says both)."""
        try:
            return _parse_handle(handle)
        except ValueError:
            return None

    async def exit_status(self, handle: EngineHandle) -> ExitStatus | None:
        return self._exit_status(handle)

    def _exit_status(self, handle: EngineHandle) -> ExitStatus | None:
        self._sweep_redactors()
        pid, start_time = _parse_handle(handle)
        if (known := self._exited.get(handle.id)) is not None:
            return known
        child = self._children.get(pid)
        if child is not None:
            code = child.poll()
            if code is None:
                return None
            del self._children[pid]
            status = _status_of_code(code)
            self._exited.remember(handle.id, status)
            return status
        if _is_same_process_alive(pid, start_time):
            return None
        return ExitStatus(exit_code=None, signal_number=None)

    async def find_engines(self, owner: str) -> list[FoundEngine]:
        return await asyncio.to_thread(self._find_engines, owner)

    def _find_engines(self, owner: str) -> list[FoundEngine]:
        # One engine per launch token: the oldest process group carrying it (an engine whose
        # children made groups of their own is still one engine).
        groups: dict[int, EngineIdentity] = {}
        for candidate in psutil.process_iter(["pid", "status"]):
            try:
                if candidate.info["status"] == psutil.STATUS_ZOMBIE:
                    continue
                environment = candidate.environ()
                if (
                    environment.get(ENV_OWNER) != owner
                    or environment.get(ENV_RUNTIME, "process") != "process"
                ):
                    continue
                group = os.getpgid(candidate.pid)
            except (psutil.Error, ProcessLookupError, PermissionError, OSError):
                continue
            groups.setdefault(group, ENV_MARKERS.read(environment))
        by_token: dict[str, FoundEngine] = {}
        for group, identity in sorted(groups.items()):
            try:
                start_time = psutil.Process(group).create_time()
            except psutil.NoSuchProcess:
                start_time = 0.0  # the launcher is gone, its children are not: an orphan to stop
            key = identity.launch_token or f"group-{group}"
            if key not in by_token:
                by_token[key] = FoundEngine(handle=process_handle(group, start_time), identity=identity)
        return list(by_token.values())

    async def resume(self, handle: EngineHandle, log_path: Path) -> None:
        logger.info("re-adopted engine %s", handle.label)

    async def stop(self, handle: EngineHandle, *, grace_seconds: float) -> None:
        pid, _ = _parse_handle(handle)
        group = pid
        try:
            if self._stop_signal_target(handle) == "launcher":
                os.kill(pid, signal.SIGTERM)
            else:
                os.killpg(group, signal.SIGTERM)
        except ProcessLookupError:
            pass
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_seconds
        while loop.time() < deadline:
            self._exit_status(handle)  # reaps our child as soon as it exits
            if not _group_members(group):
                break
            await asyncio.sleep(_POLL_INTERVAL_SECONDS)
        else:
            leftovers = _group_members(group)
            logger.warning(
                "engine %s still has %d process(es) after %.0f s: killing its group",
                handle.label,
                len(leftovers),
                grace_seconds,
            )
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
            for _ in range(_KILL_WAIT_POLLS):
                self._exit_status(handle)
                if not _group_members(group):
                    break
                await asyncio.sleep(_POLL_INTERVAL_SECONDS)
        code = await asyncio.to_thread(self._reap, pid)
        if code is not None:
            self._exited.remember(handle.id, _status_of_code(code))
        self._ports.release(handle.id)

    def _stop_signal_target(self, handle: EngineHandle) -> SignalTarget:
        """Where this engine's SIGTERM goes, as it carries it in its environment; its group
        once the launcher is gone (nothing else could pass the signal on)."""
        if self._exit_status(handle) is not None:
            return "group"
        try:
            return stop_signal_target_of(psutil.Process(_parse_handle(handle)[0]).environ())
        except (psutil.Error, OSError):
            return "group"

    def _reap(self, pid: int) -> int | None:
        """Wait for our launcher child, so that no zombie is left (its group is gone by now);
        its return code, or None when it was not (or no longer) our child."""
        child = self._children.get(pid)
        if child is None:
            return None
        try:
            code = child.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            logger.warning("engine pid %s did not exit after its group was killed", pid)
            return None
        self._children.pop(pid, None)
        self._reap_redactor(pid, timeout=5.0)
        return code

    def _reap_redactor(self, pid: int, timeout: float) -> None:
        """Wait for the relay of an engine that was stopped (it ends at the engine's end of file)."""
        relay = self._redactors.pop(pid, None)
        if relay is None:
            return
        try:
            relay.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            logger.warning("the log redactor of engine pid %s is still running", pid)
            self._redactors[pid] = relay

    def _sweep_redactors(self) -> None:
        """Reap the relays that have ended (their engines exited), so that none stays a zombie."""
        for pid, relay in list(self._redactors.items()):
            if relay.poll() is not None:
                del self._redactors[pid]

    async def close(self) -> None:
        return None


def _status_of_code(code: int) -> ExitStatus:
    """A ``Popen.returncode`` as an ``ExitStatus`` (negative: the signal that killed it)."""
    if code < 0:
        return ExitStatus(exit_code=None, signal_number=-code)
    return ExitStatus(exit_code=code, signal_number=None)


def _is_same_process_alive(pid: int, start_time: float) -> bool:
    try:
        candidate = psutil.Process(pid)
        if candidate.status() == psutil.STATUS_ZOMBIE:
            return False
        return abs(candidate.create_time() - start_time) < _START_TIME_TOLERANCE_SECONDS
    except psutil.NoSuchProcess:
        return False
