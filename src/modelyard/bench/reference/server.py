"""Starting and stopping the reference server: in a thread, as a child process, or as a program.

    with ReferenceServer(ReferenceConfig(ttft_ms=30, itl_ms=5)) as server:
        httpx.post(server.base_url + "/v1/chat/completions", json={...})

    with ReferenceServerProcess(ReferenceConfig(flavor="sglang")) as server:   # its own process
        ...

``base_url`` is the server root (``http://127.0.0.1:PORT``, no ``/v1``). The port is bound before
the server starts, so ``port=0`` is safe: the bound port is known at once. While a vLLM or
transformers flavor "loads" (``startup_delay_s``) the port is bound but not listening, so
connections are refused, as with the real engines; an SGLang flavor listens at once and answers
``/health`` with 503 until it is warm.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from types import TracebackType

import uvicorn

from modelyard.bench.reference.app import ReferenceEngine, create_reference_app
from modelyard.bench.reference.config import ReferenceConfig, parse_reference_argv
from modelyard.errors import EngineStartFailed

logger = logging.getLogger(__name__)
PR_SET_PDEATHSIG = 1
engine_log = logging.getLogger("modelyard.bench.reference.engine")
"""The lines a real engine would print (load progress, KV-cache size, readiness, failures)."""


def _engine_line(config: ReferenceConfig, level: str, source: str, text: str) -> str:
    now = datetime.now()
    if config.flavor == "vllm":
        return f"{level} {now:%m-%d %H:%M:%S} [{source}] {text}"
    if config.flavor == "sglang":
        return f"[{now:%Y-%m-%d %H:%M:%S}] {text}"
    return f"{level}:     {text}"


def _vllm_arguments(config: ReferenceConfig) -> dict[str, object]:
    """What vLLM logs as its "non-default args" at start: its own flags, the API key among them."""
    arguments: dict[str, object] = {"model_tag": config.model_path, "host": config.host, "port": config.port}
    if config.api_key is not None:
        arguments["api_key"] = [config.api_key]
    arguments["model"] = config.model_path
    arguments["served_model_name"] = list(config.served_model_names)
    return arguments


def _sglang_arguments(config: ReferenceConfig) -> str:
    """SGLang's ``server_args=ServerArgs(...)`` line at start: every field, the API key included."""
    return (
        f"ServerArgs(model_path={config.model_path!r}, host={config.host!r}, port={config.port}, "
        f"api_key={config.api_key!r}, served_model_name={config.served_model_names[0]!r})"
    )


def failure_lines(config: ReferenceConfig) -> list[str]:
    """What the engine prints when it cannot start, ending with the configured message."""
    message = config.fail_start or ""
    if config.flavor == "vllm":
        return [_engine_line(config, "ERROR", "core.py:708", "EngineCore failed to start."), message]
    if config.flavor == "sglang":
        return [
            _engine_line(
                config, "ERROR", "", "Scheduler hit an exception: Traceback (most recent call last):"
            ),
            message,
        ]
    return [message]


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind (not listen) so the port is reserved and known; connections are refused until listening."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise EngineStartFailed(
            f"reference server cannot bind {host}:{port}: {error}", hint="pick another --port, or 0 for any"
        ) from error
    sock.set_inheritable(True)
    return sock


async def serve_reference(
    config: ReferenceConfig,
    sock: socket.socket,
    *,
    engine: ReferenceEngine | None = None,
    on_server: threading.Event | None = None,
    holder: list[uvicorn.Server] | None = None,
) -> None:
    """Run one reference server on a bound socket until it is told to exit."""
    engine = engine or ReferenceEngine(config)
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            create_reference_app(engine),
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_keep_alive=30,
            backlog=4096,
        )
    )
    if holder is not None:
        holder.append(server)
    if on_server is not None:
        on_server.set()
    flavor = config.flavor
    model = config.model_path
    if flavor == "vllm":
        engine_log.info(
            _engine_line(config, "INFO", "api_server.py:1885", f"vLLM API server version 0.25.0 ({model})")
        )
        engine_log.info(
            _engine_line(config, "INFO", "api_utils.py:273", f"non-default args: {_vllm_arguments(config)}")
        )
        if config.ignored_arguments:
            engine_log.info(
                _engine_line(config, "INFO", "reference", f"ignored: {' '.join(config.ignored_arguments)}")
            )
        engine_log.info(
            _engine_line(config, "INFO", "gpu_model_runner.py:2602", "Starting to load model " + model)
        )
    elif flavor == "sglang":
        engine_log.info(_engine_line(config, "INFO", "", f"server_args={_sglang_arguments(config)}"))
    elif flavor == "transformers":
        engine_log.info(_engine_line(config, "INFO", "", f"Loading {model}"))
    if flavor != "sglang" and config.startup_delay_s > 0:
        await asyncio.sleep(config.startup_delay_s)

    async def warm_up() -> None:
        if config.startup_delay_s > 0:
            await asyncio.sleep(config.startup_delay_s)
        if config.kv_cache_memory_gib is not None:
            half = f"{config.kv_cache_memory_gib / 2:.2f}"
            engine_log.info(
                _engine_line(
                    config,
                    "INFO",
                    "",
                    f"KV Cache is allocated. #tokens: {config.kv_cache_tokens}, K size: {half} GB, "
                    f"V size: {half} GB",
                )
            )
        engine_log.info(
            _engine_line(
                config,
                "INFO",
                "",
                (
                    f"max_total_num_tokens={config.kv_cache_tokens}, chunked_prefill_size=8192, "
                    "max_prefill_tokens=16384, "
                    f"max_running_requests={config.max_concurrency}, context_len={config.max_model_len}"
                ),
            )
        )
        engine.ready = True
        engine_log.info(_engine_line(config, "INFO", "", "The server is fired up and ready to roll!"))

    if flavor == "vllm":
        if config.kv_cache_memory_gib is not None:
            engine_log.info(
                _engine_line(
                    config,
                    "INFO",
                    "gpu_worker.py:298",
                    f"Available KV cache memory: {config.kv_cache_memory_gib:.2f} GiB",
                )
            )
        if config.kv_cache_memory_gib is not None and config.cuda_graph_gib is not None:
            engine_log.info(
                _engine_line(
                    config,
                    "DEBUG",
                    "gpu_worker.py:835",
                    f"Actual usage is {config.overhead_gib:.2f} GiB for weight, 0.0 GiB for peak "
                    "activation, 0.0 GiB for non-torch memory, and "
                    f"{config.cuda_graph_gib:.2f} GiB for CUDAGraph memory. Current kv cache memory in "
                    f"use is {config.kv_cache_memory_gib:.2f} GiB.",
                )
            )
        size = f"{config.kv_cache_tokens:,}"
        engine_log.info(
            _engine_line(config, "INFO", "kv_cache_utils.py:1087", f"GPU KV cache size: {size} tokens")
        )
        times = config.kv_cache_tokens / config.max_model_len
        engine_log.info(
            _engine_line(
                config,
                "INFO",
                "kv_cache_utils.py:1091",
                f"Maximum concurrency for {config.max_model_len:,} tokens per request: {times:.2f}x",
            )
        )
        engine_log.info(
            _engine_line(
                config,
                "INFO",
                "api_server.py:1971",
                f"Starting vLLM API server 0 on http://{config.host}:{port}",
            )
        )
    elif flavor == "sglang":
        engine_log.info(_engine_line(config, "INFO", "", f"Load weight begin. model={model}"))
        if config.ignored_arguments:
            engine_log.info(
                _engine_line(config, "INFO", "", f"ignored: {' '.join(config.ignored_arguments)}")
            )
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    deadline_s = time.monotonic() + 30
    while not server.started and not serving.done() and time.monotonic() < deadline_s:
        await asyncio.sleep(0.005)
    if server.started:
        if flavor == "sglang":
            engine_log.info(
                _engine_line(config, "INFO", "", f"Uvicorn running on http://{config.host}:{port}")
            )
        engine_log.info("INFO:     Application startup complete.")
        if config.port_file:
            temporary = Path(config.port_file + ".tmp")
            temporary.write_text(str(port))
            temporary.replace(config.port_file)
    warming = asyncio.create_task(warm_up()) if flavor == "sglang" else None
    try:
        await serving
    finally:
        if warming is not None:
            warming.cancel()


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop when installed (it comes with uvicorn[standard]), else asyncio's default loop."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


class ReferenceServer:
    """A reference server on a thread of this process (for tests); a context manager."""

    def __init__(self, config: ReferenceConfig | None = None) -> None:
        self.config = config or ReferenceConfig()
        self.engine = ReferenceEngine(self.config)
        self._thread: threading.Thread | None = None
        self._servers: list[uvicorn.Server] = []
        self._socket: socket.socket | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    def start(self, *, wait_ready: bool = True, timeout_s: float = 30.0) -> str:
        """Start serving and return ``base_url``; waits for listening (and warm, unless told not to)."""
        if self.config.fail_start is not None:
            raise EngineStartFailed(
                f"reference server ({self.config.flavor}) failed to start: {self.config.fail_start}"
            )
        self._socket = bind_socket(self.config.host, self.config.port)
        self.port = self._socket.getsockname()[1]
        created = threading.Event()
        sock = self._socket

        def run() -> None:
            with asyncio.Runner(loop_factory=_loop_factory()) as runner:
                runner.run(
                    serve_reference(
                        self.config, sock, engine=self.engine, on_server=created, holder=self._servers
                    )
                )

        self._thread = threading.Thread(target=run, name=f"reference-server-{self.port}", daemon=True)
        self._thread.start()
        if not wait_ready:
            return self.base_url
        deadline_s = time.monotonic() + self.config.startup_delay_s + timeout_s
        while time.monotonic() < deadline_s:
            if self._servers and self._servers[0].started and self.engine.ready:
                return self.base_url
            if not self._thread.is_alive():
                break
            time.sleep(0.01)
        self.stop()
        raise EngineStartFailed(
            f"reference server on port {self.port} did not become ready within {timeout_s} s"
        )

    def stop(self) -> None:
        for server in self._servers:
            server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def __enter__(self) -> ReferenceServer:
        if self._thread is None:
            self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()


class ReferenceServerProcess:
    """A reference server in a child process (its own interpreter and core); a context manager."""

    def __init__(self, config: ReferenceConfig | None = None, *, log_path: Path | None = None) -> None:
        self.config = config or ReferenceConfig()
        self.log_path = log_path
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._directory: tempfile.TemporaryDirectory[str] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    def start(self, *, timeout_s: float = 30.0) -> str:
        self._directory = tempfile.TemporaryDirectory(prefix="modelyard-reference-")
        port_file = Path(self._directory.name) / "port"
        log_path = self.log_path or Path(self._directory.name) / "server.log"
        argv = [
            sys.executable,
            "-m",
            "modelyard.bench.reference_server",
            *self.config.replace(port_file=str(port_file)).to_argv(),
        ]
        with open(log_path, "wb") as log:
            self._process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline_s = time.monotonic() + self.config.startup_delay_s + timeout_s
        while time.monotonic() < deadline_s:
            if port_file.exists():
                self.port = int(port_file.read_text())
                return self.base_url
            if self._process.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
        raise EngineStartFailed(
            f"reference server process did not start within {timeout_s} s; its log ends: {tail}"
        )

    def stop(self) -> None:
        if self._process is not None:
            if self._process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._process.pid, signal.SIGTERM)
                try:
                    self._process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait(timeout=10)
            self._process = None
        if self._directory is not None:
            self._directory.cleanup()
            self._directory = None

    def __enter__(self) -> ReferenceServerProcess:
        if self._process is None:
            self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()


def _die_with_parent() -> None:
    """Linux: have the kernel send SIGTERM to this worker when the first process exits."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def run_reference_program(config: ReferenceConfig) -> int:
    """Run in the foreground until SIGINT/SIGTERM; the exit status of the program."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    engine_log.addHandler(handler)
    engine_log.setLevel(logging.INFO)
    engine_log.propagate = False
    if config.fail_start is not None:
        for line in failure_lines(config):
            engine_log.error(line)
        return 1
    sock = bind_socket(config.host, config.port)
    children: list[int] = []
    if config.workers > 1:
        sock.listen(4096)
        for _ in range(config.workers - 1):
            child = os.fork()
            if child == 0:
                _die_with_parent()
                worker_config = config.replace(port_file=None)
                with asyncio.Runner(loop_factory=_loop_factory()) as runner:
                    runner.run(serve_reference(worker_config, sock))
                os._exit(0)
            children.append(child)
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(serve_reference(config, sock))
    finally:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGTERM)
        for child in children:
            os.waitpid(child, 0)
    return 0


def serves_http(config: ReferenceConfig) -> bool:
    """Only rank 0 of a multi-node engine serves HTTP (vLLM ranks > 0 run ``--headless``)."""
    if config.flavor == "vllm":
        return not config.headless
    return config.node_rank == 0


def run_headless_rank(config: ReferenceConfig) -> int:
    """A rank above 0: say so as the engine would, then hold until told to stop (SIGTERM)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(
        _engine_line(
            config,
            "INFO",
            "core.py:93",
            f"headless rank {config.node_rank} of {config.nnodes} nodes started (no API server)",
        ),
        flush=True,
    )
    stop.wait()
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m modelyard.bench.reference_server ...`` (see ``config.parse_reference_argv``)."""
    config = parse_reference_argv(list(sys.argv[1:] if argv is None else argv), os.environ)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    if not serves_http(config):
        return run_headless_rank(config)
    return run_reference_program(config)
