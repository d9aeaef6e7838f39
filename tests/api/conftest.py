"""The REST API in-process: the real router, error handlers and a real SQLite file.

Only the controller is a double (``ControllerDouble``): it counts pokes and reports a GPU
inventory chosen by the test, because this machine has no GPUs and the tests must not start engines.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select

from modelyard.control.scheduler import LOCAL_WORKER, Worker, local_worker
from modelyard.hardware.gpus import GpuInfo, GpuInventory
from modelyard.server.api.router import api_router
from modelyard.server.context import ServerContext
from modelyard.server.errors import install_error_handlers
from modelyard.services.users import ensure_admin, write_password_file
from modelyard.settings import Settings
from modelyard.store.database import Database
from modelyard.store.tables import User


def fake_gpu(index: int, memory_total_bytes: int = 48 * 2**30) -> GpuInfo:
    return GpuInfo(
        index=index,
        uuid=f"GPU-double-{index}",
        name="GPU double",
        memory_total_bytes=memory_total_bytes,
        memory_free_bytes=memory_total_bytes,
        memory_used_bytes=0,
    )


def fake_inventory(gpu_count: int, driver_version: str = "580.95.05") -> GpuInventory:
    """A host with ``gpu_count`` GPU doubles and a driver recent enough for every built-in engine."""
    return GpuInventory(
        gpus=[fake_gpu(index) for index in range(gpu_count)],
        driver_version=driver_version,
        cuda_driver_version="13.0",
    )


@dataclass
class ControllerDouble:
    """Stands in for the controller: records pokes, reports the inventory and workers it was given
    (default: this host alone, with the inventory's GPUs; a test of a cluster sets ``cluster``)."""

    inventory: GpuInventory = field(
        default_factory=lambda: GpuInventory(unavailable_reason="no GPUs (double)")
    )
    pokes: int = 0
    cluster: list[Worker] | None = None

    def poke(self) -> None:
        self.pokes += 1

    def gpu_inventory(self) -> GpuInventory:
        return self.inventory

    def workers(self) -> list[Worker]:
        if self.cluster is not None:
            return list(self.cluster)
        return [local_worker(self.inventory, LOCAL_WORKER)]


@dataclass
class KeyCacheDouble:
    """Stands in for the gateway's key cache: counts invalidations."""

    invalidations: int = 0

    def invalidate(self) -> None:
        self.invalidations += 1


@dataclass
class ApiHarness:
    client: TestClient
    anonymous: TestClient
    context: ServerContext
    controller: ControllerDouble
    key_cache: KeyCacheDouble
    password: str
    data_dir: Path

    @property
    def database(self) -> Database:
        return self.context.database


def build_app(context: ServerContext) -> FastAPI:
    app = FastAPI()
    app.state.context = context
    app.include_router(api_router)
    install_error_handlers(app)
    return app


@dataclass(frozen=True)
class AdminTemplate:
    """Made once per session: the admin's password and hash (scrypt is slow on purpose), and a
    migrated SQLite file with that admin, copied for each test instead of migrating again."""

    password: str
    password_hash: str
    sqlite_file: Path


@pytest.fixture(scope="session")
def admin_template(tmp_path_factory: pytest.TempPathFactory) -> AdminTemplate:
    folder = tmp_path_factory.mktemp("template")
    database = Database.open(f"sqlite:///{folder / 'modelyard.db'}")
    password = ensure_admin(database, folder / "admin-password")
    assert password is not None
    with database.session() as session:
        password_hash = session.scalars(select(User.password_hash)).one()
    database.close()  # checkpoints the WAL into the file
    return AdminTemplate(password, password_hash, folder / "modelyard.db")


def _open_with_admin(database_url: str, settings: Settings, template: AdminTemplate) -> Database:
    if database_url.startswith("sqlite"):
        shutil.copyfile(template.sqlite_file, settings.data_dir / "modelyard.db")
        return Database.open(f"sqlite:///{settings.data_dir / 'modelyard.db'}")
    database = Database.open(database_url)
    with database.session() as session:
        session.add(User(username="admin", password_hash=template.password_hash, is_admin=True, role="admin"))
        session.commit()
    return database


@pytest.fixture
def api(tmp_path: Path, database_url: str, admin_template: AdminTemplate) -> Iterator[ApiHarness]:
    """The API on a fresh database (a SQLite file, and PostgreSQL when the suite has one) with
    the admin created as at first start."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    settings = Settings(data_dir=data_dir, port=18080, deploy_demo=False, database_url_override=database_url)
    database = _open_with_admin(database_url, settings, admin_template)
    write_password_file(settings.admin_password_file, admin_template.password)
    controller = ControllerDouble()
    key_cache = KeyCacheDouble()
    context = ServerContext(settings=settings, database=database, controller=controller, key_cache=key_cache)
    app = build_app(context)
    password = admin_template.password
    with TestClient(app) as client, TestClient(app) as anonymous:
        client.auth = ("admin", password)
        yield ApiHarness(client, anonymous, context, controller, key_cache, password, data_dir)
    database.close()


def assert_error(response_json: object, code: str, *fragments: str) -> None:
    assert isinstance(response_json, dict), response_json
    error = response_json["error"]
    assert error["code"] == code, error
    for fragment in fragments:
        assert fragment in error["message"], error


def add_model(api: ApiHarness, path: Path, name: str = "tiny") -> dict[str, object]:
    response = api.client.post("/api/v1/models", json={"name": name, "path": str(path)})
    assert response.status_code == 201, response.text
    body = response.json()
    assert isinstance(body, dict)
    return body
