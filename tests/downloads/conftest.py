"""Pulls, imports and exports against hub DOUBLES (no hub is reachable here), with real parts
everywhere else: the real REST API and ``DownloadManager`` under uvicorn on loopback, a real
database (SQLite file, and PostgreSQL where a test takes ``database_url``), the real CLI.

- ``tiny_model``: a real tiny TEST model in seven safetensors shards (the
  ``tiny-qwen3-small-shards`` recipe of ``tests/model_cache.py``); every hub double serves it.
- ``hf_hub`` / ``modelscope_hub``: ``modelyard.testing.hub_doubles`` on their own ports.
- ``fast_options``: the download settings with a short stall timeout and back-off, so that a
  stall or a retry takes a fraction of a second (no sleeps in the tests).
- ``start_server``: a server on a data directory, with the options (and the disk space source)
  a test chooses; ``.cli(...)`` runs ``modelyard`` against it as a user on that host would.

The shared venv sets ``HF_HUB_OFFLINE=1`` for the engines; ``huggingface_hub`` reads it once at
import, so ``hub_online`` switches that module's flag off, as the environment of a server that
may pull would have it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from typer.testing import CliRunner, Result

from model_cache import ModelCache
from modelyard.cli.main import app as cli_app
from modelyard.control.scheduler import LOCAL_WORKER, Worker, local_worker
from modelyard.downloads import DownloadManager, DownloadOptions
from modelyard.hardware.gpus import GpuInfo, GpuInventory
from modelyard.hub.transfer import TransferOptions
from modelyard.server.api.router import api_router
from modelyard.server.context import ServerContext
from modelyard.server.errors import install_error_handlers
from modelyard.services.users import ensure_admin
from modelyard.settings import Settings
from modelyard.store.database import Database
from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.hub_doubles import HuggingFaceHubDouble, ModelScopeDouble, RepositoryDouble

REPO_ID = "modelyard-test/tiny-qwen3"
# Two of the seven shards of the test model (74.6 KB each).
SHARD_1 = "model-00001-of-00007.safetensors"
SHARD_2 = "model-00006-of-00007.safetensors"
FINAL_STATES = ("completed", "failed", "cancelled")


@pytest.fixture(scope="session")
def tiny_model(test_models: ModelCache, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return test_models.copy("tiny-qwen3-small-shards", tmp_path_factory.mktemp("hub-model") / "tiny-qwen3")


@pytest.fixture(scope="session")
def repository(tiny_model: Path) -> RepositoryDouble:
    return RepositoryDouble.from_directory(REPO_ID, tiny_model)


@pytest.fixture(autouse=True)
def hub_online(monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.fixture
def hf_hub(repository: RepositoryDouble) -> Iterator[HuggingFaceHubDouble]:
    with HuggingFaceHubDouble([repository]) as hub:
        yield hub


@pytest.fixture
def modelscope_hub(repository: RepositoryDouble) -> Iterator[ModelScopeDouble]:
    with ModelScopeDouble([repository]) as hub:
        yield hub


FAST_TRANSFER = TransferOptions(
    stall_timeout_seconds=0.4,
    connect_timeout_seconds=5.0,
    attempts_without_progress=3,
    backoff_initial_seconds=0.01,
    backoff_max_seconds=0.05,
    hash_attempts=2,
)


@pytest.fixture
def fast_options(hf_hub: HuggingFaceHubDouble, modelscope_hub: ModelScopeDouble) -> DownloadOptions:
    return DownloadOptions(
        hf_endpoint=hf_hub.endpoint,
        modelscope_endpoint=modelscope_hub.endpoint,
        transfer=FAST_TRANSFER,
        progress_interval_seconds=0.05,
        shutdown_grace_seconds=2.0,
    )


class ControllerDouble:
    """The controller is not the subject: deployments are stored, no engine starts. It reports
    the GPUs a test asks for (doubles of the hardware, as NVML would describe them)."""

    def __init__(self, gpus: list[GpuInfo]) -> None:
        self.gpus = gpus

    def poke(self) -> None:
        return None

    def gpu_inventory(self) -> GpuInventory:
        if not self.gpus:
            return GpuInventory(unavailable_reason="no GPUs (controller double)")
        return GpuInventory(gpus=self.gpus, driver_version="580.95.05", cuda_driver_version="13.0")

    def workers(self) -> list[Worker]:
        return [local_worker(self.gpu_inventory(), LOCAL_WORKER)]


def h100s(count: int) -> list[GpuInfo]:
    total = int(79.19 * (1 << 30))
    return [
        GpuInfo(
            index=index,
            uuid=f"GPU-double-{index}",
            name="NVIDIA H100 80GB HBM3",
            memory_total_bytes=total,
            memory_free_bytes=total,
            memory_used_bytes=0,
        )
        for index in range(count)
    ]


@dataclass
class PullServer:
    url: str
    data_dir: Path
    password: str
    database: Database
    manager: DownloadManager
    runner: CliRunner = field(default_factory=CliRunner)

    def cli(self, *args: str) -> Result:
        environment = {
            "MODELYARD_URL": self.url,
            "MODELYARD_DATA_DIR": str(self.data_dir),
            "MODELYARD_PASSWORD": self.password,
            "NO_COLOR": "1",
        }
        return self.runner.invoke(cli_app, list(args), env=environment)

    def api(self, method: str, path: str, **arguments: Any) -> httpx.Response:
        with httpx.Client(
            base_url=f"{self.url}/api/v1",
            auth=("admin", self.password),
            timeout=30,
            verify=shared_tls_context(),
        ) as client:
            return client.request(method, path, **arguments)

    def wait_for_task(self, task_id: int, seconds: float = 30.0) -> dict[str, Any]:
        """Poll the task until it ends (the CLI's `tasks wait` does the same)."""
        deadline = time.monotonic() + seconds
        while True:
            task: dict[str, Any] = self.api("GET", f"/tasks/{task_id}").json()
            if task["state"] in FINAL_STATES:
                return task
            if time.monotonic() > deadline:
                raise AssertionError(f"task {task_id} still {task['state']} after {seconds:.0f} s: {task}")
            time.sleep(0.05)


def _free_socket() -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    return listener


def _app(context: ServerContext, options: DownloadOptions, holder: list[DownloadManager]) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        manager = DownloadManager(context.database, context.settings.models_dir, options)
        await manager.start()
        context.downloads = manager
        holder.append(manager)
        try:
            yield
        finally:
            await manager.shutdown()

    app = FastAPI(lifespan=lifespan)
    app.state.context = context
    app.include_router(api_router)
    install_error_handlers(app)
    return app


StartServer = Callable[..., PullServer]


@pytest.fixture
def start_server(tmp_path: Path, fast_options: DownloadOptions) -> Iterator[StartServer]:
    """``start_server(name="a", database_url=None, gpus=[], **option_changes)``: a running server."""
    stoppers: list[Callable[[], None]] = []

    def start(
        name: str = "data", database_url: str | None = None, gpus: list[GpuInfo] | None = None, **changes: Any
    ) -> PullServer:
        data_dir = tmp_path / name
        listener = _free_socket()
        settings = Settings(
            data_dir=data_dir,
            port=listener.getsockname()[1],
            deploy_demo=False,
            database_url_override=database_url,
        )
        database = Database.open(settings.database_url)
        password = ensure_admin(database, settings.admin_password_file)
        assert password is not None
        context = ServerContext(settings=settings, database=database, controller=ControllerDouble(gpus or []))
        holder: list[DownloadManager] = []
        server = uvicorn.Server(
            uvicorn.Config(_app(context, replace(fast_options, **changes), holder), log_level="warning")
        )
        thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
        thread.start()
        started = threading.Event()
        for _ in range(1000):
            if server.started:
                break
            started.wait(0.01)
        assert server.started, "the test server did not start within 10 s"

        def stop() -> None:
            server.should_exit = True
            thread.join(timeout=15)
            listener.close()
            database.close()

        stoppers.append(stop)
        return PullServer(f"http://127.0.0.1:{settings.port}", data_dir, password, database, holder[0])

    yield start
    for stop in reversed(stoppers):
        stop()
