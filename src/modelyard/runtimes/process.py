"""Engines as child processes of this host, each in its own process group (session).

The launcher's pid is also its process group id (``start_new_session=True``), so a stop reaches
every process the engine spawned (vLLM's engine core, SGLang's scheduler and detokenizer), and
``os.killpg`` still works after the launcher itself is gone. Engines outlive a killed server
on purpose: the next server re-adopts them by pid and start time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
from pathlib import Path

import psutil

from modelyard.errors import EngineStartFailed
from modelyard.runtimes.base import EngineProcess, ExitStatus, LaunchSpec, SignalTarget
from modelyard.secret_names import mask_arguments

logger = logging.getLogger(__name__)

# Start times of the same process read twice differ by rounding only.
_START_TIME_TOLERANCE_SECONDS = 1.0
_POLL_INTERVAL_SECONDS = 0.1


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


class ProcessRuntime:
    """Starts engines with ``subprocess.Popen``; see the module docstring."""

    def __init__(self) -> None:
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        # How reaped children ended, so that every caller sees the same status.
        self._exited: dict[int, ExitStatus] = {}

    def start(self, spec: LaunchSpec) -> EngineProcess:
        spec.log_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        environment = {**os.environ, **spec.env}
        # Readable by the server's user only (0600); the command line without its secrets.
        descriptor = os.open(spec.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(descriptor, "ab") as log_file:
            log_file.write(f"$ {' '.join(mask_arguments(spec.argv))}\n".encode())
            log_file.flush()
            try:
                child = subprocess.Popen(
                    spec.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=environment,
                    cwd=spec.working_directory,
                    start_new_session=True,
                )
            except FileNotFoundError as error:
                log_file.write(f"executable not found: {spec.argv[0]}\n".encode())
                raise EngineStartFailed(
                    f"executable not found: {spec.argv[0]!r}",
                    hint="install the engine, or give the backend version the full path of its executable",
                ) from error
            except PermissionError as error:
                log_file.write(f"permission denied: {spec.argv[0]}\n".encode())
                raise EngineStartFailed(
                    f"cannot execute {spec.argv[0]!r}: permission denied", hint="chmod +x it"
                ) from error
        self._children[child.pid] = child
        self._exited.pop(child.pid, None)
        try:
            start_time = psutil.Process(child.pid).create_time()
        except psutil.NoSuchProcess:
            start_time = 0.0
        logger.info("started engine pid %s: %s", child.pid, spec.argv[0])
        return EngineProcess(
            pid=child.pid, start_time=start_time, log_path=spec.log_path, argv=list(spec.argv)
        )

    def exit_status(self, process: EngineProcess) -> ExitStatus | None:
        if process.pid in self._exited:
            return self._exited[process.pid]
        child = self._children.get(process.pid)
        if child is not None:
            code = child.poll()
            if code is None:
                return None
            del self._children[process.pid]
            status = (
                ExitStatus(exit_code=None, signal_number=-code)
                if code < 0
                else ExitStatus(exit_code=code, signal_number=None)
            )
            self._exited[process.pid] = status
            return status
        if self._is_same_process_alive(process.pid, process.start_time):
            return None
        return ExitStatus(exit_code=None, signal_number=None)

    def adopt(self, pid: int, start_time: float, log_path: Path) -> EngineProcess | None:
        if not self._is_same_process_alive(pid, start_time):
            return None
        try:
            argv = psutil.Process(pid).cmdline()
        except psutil.Error:
            argv = []
        logger.info("re-adopted engine pid %s", pid)
        return EngineProcess(pid=pid, start_time=start_time, log_path=log_path, argv=argv)

    async def stop(
        self, process: EngineProcess, *, signal_target: SignalTarget, grace_seconds: float
    ) -> None:
        group = process.pid
        try:
            if signal_target == "launcher" and self.exit_status(process) is None:
                os.kill(process.pid, signal.SIGTERM)
            else:
                os.killpg(group, signal.SIGTERM)
        except ProcessLookupError:
            pass
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_seconds
        while loop.time() < deadline:
            self.exit_status(process)  # reaps our child as soon as it exits
            if not _group_members(group):
                return
            await asyncio.sleep(_POLL_INTERVAL_SECONDS)
        leftovers = _group_members(group)
        logger.warning(
            "engine pid %s still has %d process(es) after %.0f s: killing its group",
            process.pid,
            len(leftovers),
            grace_seconds,
        )
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
        for _ in range(50):
            self.exit_status(process)
            if not _group_members(group):
                return
            await asyncio.sleep(_POLL_INTERVAL_SECONDS)

    @staticmethod
    def _is_same_process_alive(pid: int, start_time: float) -> bool:
        try:
            candidate = psutil.Process(pid)
            if candidate.status() == psutil.STATUS_ZOMBIE:
                return False
            return abs(candidate.create_time() - start_time) < _START_TIME_TOLERANCE_SECONDS
        except psutil.NoSuchProcess:
            return False
