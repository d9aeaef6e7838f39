"""The gateway over real HTTP on loopback.

``GatewayHarness`` runs the gateway's ASGI app (``GatewayApp``, in front of an empty FastAPI app
whose lifespan starts the gateway in-process, as ``--gateway-workers 0`` does) on uvicorn (its own
thread and event loop), over a real SQLite file, with an ``EndpointRegistry`` the tests publish
into, as the controller would. The engines are reference servers (``modelyard.bench.reference``, the
project's engine double, playing vLLM's, SGLang's or transformers serve's contract), each on its
own thread.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvicorn
from fastapi import FastAPI
from sqlalchemy import select, update

import modelyard
from modelyard.backends.spec import DEFAULT_API_PATHS
from modelyard.bench.reference import ReferenceConfig, ReferenceServer
from modelyard.control.endpoints import Endpoint
from modelyard.server.context import ServerContext
from modelyard.server.door.http_protocol import bounded_http_protocol
from modelyard.server.door.limits import RequestLimits
from modelyard.server.gateway import GatewayApp, GatewayRuntime, GatewaySettings, start_gateway
from modelyard.server.gateway.client_out import DirectWriting
from modelyard.server.gateway.usage import UsageRecorder
from modelyard.services.key_hashing import display_prefix, generate_key, hash_key
from modelyard.settings import Settings
from modelyard.store.database import Database
from modelyard.store.tables import ApiKey, UsageRecord, utc_now
from modelyard.testing.nvml_double.pynvml import DOUBLE_FILE_VARIABLE

from .served import ServedPlatform

NVML_DOUBLE_FOLDER = str(Path(modelyard.__file__).resolve().parent / "testing" / "nvml_double")
# What the NVML double reports for the served platform's host.
NVML_DOUBLE_GPUS: list[dict[str, Any]] = [
    {
        "name": "NVIDIA H200",
        "uuid": f"GPU-{index}0000000-0000-0000-0000-000000000000",
        "memory_total_bytes": 150_754_820_096,
        "memory_used_bytes": used_bytes,
        "utilization_percent": utilization,
        "temperature_celsius": temperature,
        "power_milliwatts": power_mw,
        "power_limit_milliwatts": 700_000,
    }
    for index, (used_bytes, utilization, temperature, power_mw) in enumerate(
        [(120_000_000_000, 87, 61, 612_500), (1_000_000, 0, 33, 70_000)]
    )
]
Result = TypeVar("Result")

_instance_ids = itertools.count(1)
_names = itertools.count(1)


def unique_name(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


@dataclass
class GatewayHarness:
    database: Database
    context: ServerContext
    base_url: str = ""
    # uvicorn's HTTP implementation: "server" is the server's own (httptools with the door's
    # bounds and disconnect callbacks; the gateway writes answers itself, client_out.py); "h11"
    # serves every answer through ASGI send() and tells of a disconnect through receive().
    http: str = "server"
    # The direct writer's check (client_out.py); None: the installed uvicorn's.
    direct_writing: DirectWriting | None = None
    loop: asyncio.AbstractEventLoop | None = None
    runtime: GatewayRuntime | None = None
    _server: uvicorn.Server | None = None
    _thread: threading.Thread | None = None
    _socket: socket.socket | None = None
    _key_ids: dict[str, int] = field(default_factory=dict)
    settings: GatewaySettings = field(
        default_factory=lambda: GatewaySettings(usage_batch_delay_s=0.0, key_last_used_interval_s=3600)
    )

    # -- running on the gateway's event loop ----------------------------------------------------

    def run(self, make: Callable[[], Awaitable[Result]]) -> Result:
        """Run ``make()`` on the gateway's loop (where the registry and caches live) and wait."""
        assert self.loop is not None

        async def call() -> Result:
            return await make()

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(timeout=30)

    def call(self, function: Callable[[], Result]) -> Result:
        async def wrapper() -> Result:
            return function()

        return self.run(wrapper)

    # -- what the controller and the REST API would do -------------------------------------------

    def publish(
        self,
        deployment: str,
        servers: list[ReferenceServer],
        served_model_name: str | None = None,
        api_paths: tuple[str, ...] | None = None,
    ) -> None:
        endpoints = [
            Endpoint(
                deployment_name=deployment,
                instance_id=next(_instance_ids),
                base_url=server.base_url,
                served_model_name=served_model_name or server.config.served_model_names[0],
                reasoning_field=server.config.reasoning_field,
                engine=server.config.flavor,
                engine_version="reference",
                api_paths=api_paths if api_paths is not None else DEFAULT_API_PATHS,
            )
            for server in servers
        ]
        self.publish_endpoints(deployment, endpoints)

    def publish_endpoints(self, deployment: str, endpoints: list[Endpoint]) -> None:
        self.call(lambda: self.context.endpoints.publish(deployment, endpoints))

    def create_key(
        self, name: str | None = None, allowed_deployments: list[str] | None = None, **limits: Any
    ) -> str:
        """A key as the REST API makes it; ``limits``: ApiKey's limit columns (requests_per_minute=2)."""
        key = generate_key()
        name = name or unique_name("key")
        with self.database.session() as session:
            record = ApiKey(
                name=name,
                prefix=display_prefix(key),
                key_hash=hash_key(key),
                allowed_deployments=allowed_deployments,
                **limits,
            )
            session.add(record)
            session.commit()
            self._key_ids[key] = record.id
        self.call(lambda: self.context.key_cache.invalidate())
        return key

    def key_id(self, key: str) -> int:
        return self._key_ids[key]

    def revoke_key_in_database(self, key: str) -> None:
        with self.database.session() as session:
            session.execute(
                update(ApiKey).where(ApiKey.key_hash == hash_key(key)).values(revoked_at=utc_now())
            )
            session.commit()

    def usage_rows(self, deployment: str) -> list[UsageRecord]:
        """The usage rows of one deployment, once everything queued has been written."""
        runtime = self.runtime
        assert runtime is not None and isinstance(runtime.usage, UsageRecorder)
        self.run(runtime.usage.flush)
        with self.database.session() as session:
            return list(
                session.scalars(
                    select(UsageRecord)
                    .where(UsageRecord.deployment_name == deployment)
                    .order_by(UsageRecord.id)
                )
            )

    def outstanding(self, base_url: str) -> int:
        """Requests in flight to the published endpoint at ``base_url``."""
        runtime = self.runtime
        assert runtime is not None

        def count() -> int:
            endpoints = [e for e in runtime.registry.all_endpoints() if e.base_url == base_url]
            return sum(runtime.balancer.outstanding(endpoint) for endpoint in endpoints)

        return self.call(count)

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        harness = self

        @asynccontextmanager
        async def lifespan(app: FastAPI) -> AsyncIterator[None]:
            harness.loop = asyncio.get_running_loop()
            gateway = await start_gateway(harness.context, harness.settings)
            harness.runtime = gateway.in_process_runtime()
            try:
                yield
            finally:
                await gateway.close()

        inner = FastAPI(lifespan=lifespan)
        app = GatewayApp(lambda: self.runtime, fallback=inner, direct_writing=self.direct_writing)
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        port = self._socket.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}"
        self._server = uvicorn.Server(
            uvicorn.Config(
                app,
                http=bounded_http_protocol(RequestLimits()) if self.http == "server" else self.http,
                log_level="warning",
                access_log=False,
                lifespan="on",
                timeout_graceful_shutdown=5,
            )
        )
        sock = self._socket
        server = self._server
        self._thread = threading.Thread(
            target=lambda: asyncio.run(server.serve(sockets=[sock])), name="gateway", daemon=True
        )
        self._thread.start()
        deadline_s = time.monotonic() + 30
        while not server.started:
            if time.monotonic() > deadline_s or not self._thread.is_alive():
                raise RuntimeError("the gateway test server did not start within 30 s")
            time.sleep(0.01)

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)
        if self._socket is not None:
            self._socket.close()


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayHarness]:
    data_dir = tmp_path_factory.mktemp("gateway-data")
    settings = Settings(data_dir=data_dir, deploy_demo=False)
    database = Database.open("sqlite:///" + str(data_dir / "modelyard.db"))
    harness = GatewayHarness(database=database, context=ServerContext(settings=settings, database=database))
    harness.start()
    yield harness
    harness.stop()
    database.close()


class ReferenceServers:
    """Reference servers (the engine double) started on first use and shared by the session."""

    def __init__(self) -> None:
        self._servers: dict[str, ReferenceServer] = {}

    def get(self, name: str, **settings: Any) -> ReferenceServer:
        server = self._servers.get(name)
        if server is None:
            config = ReferenceConfig(**{"ttft_ms": 0.0, "itl_ms": 0.0, "output_tokens": 4, **settings})
            server = ReferenceServer(config)
            server.start()
            self._servers[name] = server
        return server

    def stop_all(self) -> None:
        for server in self._servers.values():
            server.stop()


@pytest.fixture(scope="session")
def engines() -> Iterator[ReferenceServers]:
    servers = ReferenceServers()
    yield servers
    servers.stop_all()


@pytest.fixture(scope="session")
def served_platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedPlatform]:
    """A real ``modelyard serve`` with two gateway workers, shared by the tests that need one.

    It reads its host's GPUs through the NVML double (two H200s, ``NVML_DOUBLE_GPUS``): the
    server's own NVML code runs, only the driver is played.
    """
    scratch = tmp_path_factory.mktemp("served")
    nvml_file = scratch / "nvml.json"
    nvml_file.write_text(json.dumps({"driver_version": "580.95.05", "gpus": NVML_DOUBLE_GPUS}))
    python_path = os.pathsep.join(filter(None, [NVML_DOUBLE_FOLDER, os.environ.get("PYTHONPATH")]))
    environment = {"PYTHONPATH": python_path, DOUBLE_FILE_VARIABLE: str(nvml_file)}
    served = ServedPlatform(scratch / "data", gateway_workers=2, environment=environment)
    served.start()
    try:
        yield served
    finally:
        served.stop()


@pytest.fixture(scope="session")
def api_key(gateway: GatewayHarness) -> str:
    """A key that may use every deployment."""
    return gateway.create_key("everything")


def engine_counter(server: ReferenceServer, name: str) -> float:
    """A counter of the reference server's /metrics (e.g. ``request_success``), read in-process."""
    value = server.engine.metrics.registry.get_sample_value(
        f"vllm:{name}_total", {"model_name": server.config.served_model_names[0]}
    )
    return value or 0.0


def wait_until_replica_is_free(
    harness: GatewayHarness, server: ReferenceServer, timeout_s: float = 10
) -> None:
    """Until neither the gateway nor the engine counts a request of ``server`` in flight (or
    ``timeout_s``; the caller asserts which)."""
    deadline_s = time.monotonic() + timeout_s
    while (harness.outstanding(server.base_url) or engine_gauge(server, "num_requests_running")) and (
        time.monotonic() < deadline_s
    ):
        time.sleep(0.02)


def engine_gauge(server: ReferenceServer, name: str) -> float:
    """A gauge of the reference server's /metrics (e.g. ``num_requests_running``)."""
    value = server.engine.metrics.registry.get_sample_value(
        f"vllm:{name}", {"model_name": server.config.served_model_names[0]}
    )
    return value or 0.0


def refused_port() -> socket.socket:
    """A bound, never-listening socket: connecting to its port is refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock


class DroppingListener:
    """Not an engine: a port that accepts connections and closes them at once, counting them."""

    def __init__(self) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(16)
        self._socket.settimeout(0.05)
        self.port = self._socket.getsockname()[1]
        self.accepted = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="dropping-listener", daemon=True)

    def _serve(self) -> None:
        while not self._stopping.is_set():
            try:
                connection, _ = self._socket.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            connection.close()

    def __enter__(self) -> DroppingListener:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stopping.set()
        self._thread.join(timeout=5)
        self._socket.close()


def data_events(raw: bytes) -> list[bytes]:
    """The ``data:`` payloads of an SSE body, in order."""
    return [event[len(b"data: ") :] for event in raw.split(b"\n\n") if event.startswith(b"data: ")]
