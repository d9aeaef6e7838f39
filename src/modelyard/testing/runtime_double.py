"""The RUNTIME DOUBLE: the Runtime contract (``runtimes/base.py``) kept in this process.

``InMemoryRuntimeDouble`` starts no process and no container. Each engine is the project's engine
double (the reference server, ``modelyard.bench.reference``) run on a thread of this process, on
a socket the double bound itself in ``allocate_address`` (bound, not listening, until the engine
"loads": connections are refused meanwhile, as with a real engine, and no other test can take the
port). It reads the engine's command line as the real program would (``python -m
modelyard.bench.reference_server vllm serve ... --fail-start ... --startup-delay-s ...``), writes
the per-start log as every runtime does (the command first, secrets masked, then the engine's
lines through the same ``Redactor``), and reports exits as a process runtime would.

What a test does to a real engine from outside it does to ``EngineHostDouble``, the "machine"
the engines run on, which outlives a runtime (a restarted server makes a new runtime on the same
host and finds its engines again)::

    host = EngineHostDouble()
    runtimes = RuntimeSet(process=InMemoryRuntimeDouble(host))
    ...
    engine = host.engine_of(handle)          # its argv, env, identity, address, exit status
    await host.kill(handle)                  # SIGKILL from outside (the OOM killer)
    host.start_count                         # engines started on it so far

It passes the contract suite of ``tests/runtimes/`` (``test_runtime_contract.py``); the
controller's decision tests run on it (``tests/control/``); the real runtimes keep their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import shutil
import signal
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import uvicorn

from modelyard.bench.reference.app import ReferenceEngine
from modelyard.bench.reference.config import ReferenceConfig, parse_reference_argv
from modelyard.bench.reference.server import engine_log, failure_lines, serve_reference
from modelyard.errors import EngineStartFailed, ModelyardError
from modelyard.runtimes.base import (
    EngineAddress,
    EngineHandle,
    EngineIdentity,
    ExitStatus,
    FoundEngine,
    LaunchSpec,
    Mount,
    RuntimeKind,
    StartedEngine,
    refuse_gangs,
)
from modelyard.runtimes.log_files import open_engine_log, shown_command
from modelyard.runtimes.log_redactor import Redactor

logger = logging.getLogger(__name__)

# The program the double plays (every other program is refused, naming it).
ENGINE_DOUBLE_MODULE = "modelyard.bench.reference_server"
_THREAD_PREFIX = "engine-double-"
_STOP_WAIT_SECONDS = 10.0


class _EngineLogRouter(logging.Handler):
    """Sends each engine double's lines (``engine_log``, logged on its thread) to its own log file,
    with its launch's secrets masked."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self._writers: dict[int, _LogWriter] = {}
        self._lock = threading.Lock()

    def register(self, thread_id: int, writer: _LogWriter) -> None:
        with self._lock:
            self._writers[thread_id] = writer

    def unregister(self, thread_id: int) -> None:
        with self._lock:
            self._writers.pop(thread_id, None)

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock:
            writer = self._writers.get(record.thread or 0)
        if writer is not None:
            writer.write_line(record.getMessage())


_router: _EngineLogRouter | None = None


def _log_router() -> _EngineLogRouter:
    """The one router of this process, on the engine double's logger (made on first use)."""
    global _router
    if _router is None:
        _router = _EngineLogRouter()
        engine_log.addHandler(_router)
        if not engine_log.isEnabledFor(logging.INFO):
            engine_log.setLevel(logging.INFO)
    return _router


class _LogWriter:
    """One start's log file: lines masked by the launch's secrets, written at once."""

    def __init__(self, log_file: BinaryIO, secrets: frozenset[str]) -> None:
        self._file = log_file
        self._redactor = Redactor(secrets)
        self._lock = threading.Lock()

    def write_line(self, text: str) -> None:
        with self._lock:
            if self._file.closed:
                return
            self._file.write(self._redactor.feed(f"{text}\n".encode()))
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.write(self._redactor.finish())
                self._file.close()


@dataclass
class EngineDouble:
    """One engine on the host: what it was started with, and how it ended (None while alive)."""

    number: int
    handle: EngineHandle
    identity: EngineIdentity
    argv: list[str]
    env: dict[str, str]
    address: EngineAddress
    config: ReferenceConfig
    status: ExitStatus | None = None
    log_path: Path | None = None
    _socket: socket.socket | None = field(default=None, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)
    _task: asyncio.Task[None] | None = field(default=None, repr=False)
    _servers: list[uvicorn.Server] = field(default_factory=list, repr=False)
    # The exit the outside asked for (a kill, a stop), reported once the thread has ended.
    _ending: ExitStatus | None = field(default=None, repr=False)
    _ended: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def alive(self) -> bool:
        return self.status is None

    @property
    def serving(self) -> bool:
        """Listening (loaded), not only started."""
        return bool(self._servers) and self._servers[0].started

    def _halt(self, status: ExitStatus, *, graceful: bool) -> None:
        """End the engine with ``status`` (from any thread). ``graceful``: a loaded engine's server
        finishes its answers (SIGTERM); otherwise its connections close at once (SIGKILL). An
        engine still loading is cancelled either way."""
        self._ending = status
        loop, task = self._loop, self._task  # read after _ending: the thread checks it after setting them
        if loop is None or task is None:
            return  # not running yet: it ends as soon as it starts
        if self.serving:
            server = self._servers[0]
            server.force_exit = not graceful
            server.should_exit = True
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(task.cancel)

    async def _wait_ended(self, seconds: float) -> bool:
        return await asyncio.to_thread(self._ended.wait, seconds)


class EngineHostDouble:
    """The machine the double's engines run on, shared by the runtimes of successive servers."""

    def __init__(self) -> None:
        self._engines: dict[str, EngineDouble] = {}
        self._numbers = itertools.count(1)
        self.start_count = 0

    def engines(self, *, alive_only: bool = True) -> list[EngineDouble]:
        return [engine for engine in self._engines.values() if engine.alive or not alive_only]

    def engine_of(self, handle: EngineHandle | dict[str, str]) -> EngineDouble:
        """The engine of a handle (or of an instance's stored handle, its JSON)."""
        if isinstance(handle, dict):
            handle = EngineHandle.from_json(handle)
        return self._engines[handle.id]

    def find(self, handle_id: str) -> EngineDouble | None:
        return self._engines.get(handle_id)

    async def kill(self, handle: EngineHandle | dict[str, str], signal_number: int = signal.SIGKILL) -> None:
        """The engine is killed from outside (as the OOM killer would); returns once it is gone."""
        engine = self.engine_of(handle)
        if engine._ended.is_set():
            return
        engine._halt(ExitStatus(exit_code=None, signal_number=signal_number), graceful=False)
        if not await engine._wait_ended(_STOP_WAIT_SECONDS):
            raise AssertionError(f"{engine.handle.label} did not end after it was killed")

    def shut_down(self) -> None:
        """The machine is turned off: every engine still running ends (a test's clean-up)."""
        for engine in self.engines():
            engine._halt(ExitStatus(exit_code=None, signal_number=signal.SIGKILL), graceful=False)
        for engine in self._engines.values():
            engine._ended.wait(_STOP_WAIT_SECONDS)

    def _add(self, engine: EngineDouble) -> None:
        self._engines[engine.handle.id] = engine
        self.start_count += 1

    def next_number(self) -> int:
        return next(self._numbers)


def _engine_arguments(argv: list[str]) -> list[str]:
    """The engine double's own command line in ``argv`` (after ``-m modelyard.bench.reference_server``);
    ``EngineStartFailed`` for a program the double does not play."""
    for index in range(len(argv) - 1):
        if argv[index] == "-m" and argv[index + 1] == ENGINE_DOUBLE_MODULE:
            return argv[index + 2 :]
    program = argv[0] if argv else ""
    if not program or (shutil.which(program) is None and not Path(program).is_file()):
        raise EngineStartFailed(
            f"executable not found: {program!r}",
            hint="install the engine, or give the backend version the full path of its executable",
        )
    raise EngineStartFailed(
        f"the in-memory runtime double runs only the engine double (python -m {ENGINE_DOUBLE_MODULE}), "
        f"not {program!r}",
        hint="launch the engine double in tests that use InMemoryRuntimeDouble",
    )


def _bound_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise EngineStartFailed(f"cannot bind {host}:{port}: {error.strerror or error}") from error
    return sock


def _reachable(bind_host: str) -> str:
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(bind_host, bind_host)


class InMemoryRuntimeDouble:
    """A Runtime (see the module docstring) playing ``kind`` (default: the process runtime)."""

    def __init__(self, host: EngineHostDouble | None = None, *, kind: RuntimeKind = "process") -> None:
        self.host = host or EngineHostDouble()
        self._kind: RuntimeKind = kind
        # Sockets of allocated addresses, by port, until a start takes them.
        self._reserved: dict[int, socket.socket] = {}

    @property
    def kind(self) -> RuntimeKind:
        return self._kind

    def engine_model_path(self, model_path: str) -> str:
        return model_path

    def mounts(self, model_path: str) -> list[Mount]:
        return []

    async def allocate_address(self, worker_host: str, *, node_id: str | None = None) -> EngineAddress:
        sock = _bound_socket(worker_host, 0)
        port = int(sock.getsockname()[1])
        self._reserved[port] = sock
        return EngineAddress(
            bind_host=worker_host, port=port, reach_host=_reachable(worker_host), reach_port=port
        )

    async def start(self, spec: LaunchSpec) -> StartedEngine:
        refuse_gangs(spec, self._kind)
        argv = [*spec.program, *spec.arguments]
        with open_engine_log(spec.log_path) as log_file:
            log_file.write(f"$ {shown_command(argv, spec.secrets)}\n".encode())
            try:
                arguments = _engine_arguments(argv)
                config = parse_reference_argv(arguments, spec.env)
            except ModelyardError as error:
                log_file.write(f"{error.message}\n".encode())
                self._release_address(spec.address.port)
                if isinstance(error, EngineStartFailed):
                    raise
                raise EngineStartFailed(
                    f"the engine double refused its arguments: {error.message}"
                ) from error
        try:
            spec.working_directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise EngineStartFailed(
                f"cannot create the engine's working directory {spec.working_directory}: "
                f"{error.strerror or error}",
                hint="check the data directory's disk space and permissions",
            ) from error
        sock = self._reserved.pop(config.port, None) or _bound_socket(config.host, config.port)
        number = self.host.next_number()
        handle = EngineHandle(runtime=self._kind, id=f"memory-{number}", label=f"engine double {number}")
        engine = EngineDouble(
            number=number,
            handle=handle,
            identity=spec.identity,
            argv=argv,
            env=dict(spec.env),
            address=spec.address,
            config=config,
            log_path=spec.log_path,
            _socket=sock,
        )
        writer = _LogWriter(open_engine_log(spec.log_path), spec.secrets)
        thread = threading.Thread(
            target=self._run, args=(engine, writer), name=f"{_THREAD_PREFIX}{number}", daemon=True
        )
        engine._thread = thread
        self.host._add(engine)
        thread.start()
        logger.info("started %s: %s", handle.label, argv[0] if argv else "")
        return StartedEngine(handle=handle, command=argv)

    def _release_address(self, port: int) -> None:
        sock = self._reserved.pop(port, None)
        if sock is not None:
            sock.close()

    @staticmethod
    def _run(engine: EngineDouble, writer: _LogWriter) -> None:
        """The engine's thread: its own event loop, as a process would have."""
        router = _log_router()
        router.register(threading.get_ident(), writer)
        config = engine.config
        exit_status = ExitStatus(exit_code=0, signal_number=None)
        try:
            if config.fail_start is not None:
                for line in failure_lines(config):
                    engine_log.error(line)
                exit_status = ExitStatus(exit_code=1, signal_number=None)
                return
            sock = engine._socket
            assert sock is not None

            async def main() -> None:
                engine._loop = asyncio.get_running_loop()
                engine._task = asyncio.current_task()
                if engine._ending is not None:  # killed before it ran
                    return
                await serve_reference(config, sock, engine=ReferenceEngine(config), holder=engine._servers)

            with contextlib.suppress(asyncio.CancelledError), asyncio.Runner() as runner:
                runner.run(main())
        except Exception as error:  # the engine crashed: as a process, it exits with status 1
            logger.exception("%s crashed", engine.handle.label)
            writer.write_line(f"Traceback: {error!r}")
            exit_status = ExitStatus(exit_code=1, signal_number=None)
        finally:
            router.unregister(threading.get_ident())
            if engine._socket is not None:
                engine._socket.close()
            writer.close()
            engine.status = engine._ending or exit_status
            engine._ended.set()
            engine._loop = engine._task = None

    async def exit_status(self, handle: EngineHandle) -> ExitStatus | None:
        engine = self.host.find(handle.id)
        if engine is None:
            return ExitStatus(exit_code=None, signal_number=None)  # not ours: status unknown
        return engine.status

    async def find_engines(self, owner: str) -> list[FoundEngine]:
        return [
            FoundEngine(handle=engine.handle, identity=engine.identity)
            for engine in self.host.engines()
            if engine.identity.owner == owner and engine.handle.runtime == self._kind
        ]

    async def resume(self, handle: EngineHandle, log_path: Path) -> None:
        logger.info("re-adopted %s", handle.label)

    def host_process(self, handle: EngineHandle) -> tuple[int, float] | None:
        return None  # a thread of this process, not a process of its own

    async def stop(self, handle: EngineHandle, *, grace_seconds: float) -> None:
        engine = self.host.find(handle.id)
        if engine is None or engine._ended.is_set():
            return
        # A loaded engine exits 0 on SIGTERM (uvicorn); one still loading dies of it.
        on_term = ExitStatus(0, None) if engine.serving else ExitStatus(None, signal.SIGTERM)
        engine._halt(on_term, graceful=True)
        if await engine._wait_ended(grace_seconds):
            return
        logger.warning("%s still running after %.0f s: killing it", handle.label, grace_seconds)
        engine._halt(ExitStatus(exit_code=None, signal_number=signal.SIGKILL), graceful=False)
        if not await engine._wait_ended(_STOP_WAIT_SECONDS):
            raise EngineStartFailed(f"{handle.label} did not end after it was killed")

    async def close(self) -> None:
        for port in list(self._reserved):
            self._release_address(port)
