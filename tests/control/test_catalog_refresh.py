"""The controller builds its backend catalog once, and again only when a custom backend is added,
edited or removed: not at every tick."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from modelyard.control.controller import Controller, ControllerOptions
from modelyard.control.endpoints import EndpointRegistry
from modelyard.errors import NotFound
from modelyard.hardware.gpus import GpuInventory
from modelyard.services.backends import import_backends, remove_backend
from modelyard.settings import Settings
from modelyard.store.database import Database

CUSTOM_YAML = """\
backend_name: my-engine
default_version: "{version}"
health_check_path: /health
version_configs:
  "{version}":
    entrypoint: my-engine
    run_command: serve {{{{model_path}}}} --host {{{{worker_ip}}}} --port {{{{port}}}}
    custom_framework: cpu
"""


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[tuple[Controller, Database]]:
    database = Database.open(f"sqlite:///{tmp_path / 'modelyard.db'}")
    controller = Controller(
        settings=Settings(data_dir=tmp_path, deploy_demo=False),
        database=database,
        endpoints=EndpointRegistry(),
        # No orphan sweep during the test: only the catalog is looked at.
        options=ControllerOptions(orphan_sweep_seconds=float("inf")),
        inventory_source=lambda: GpuInventory(unavailable_reason="no GPUs (test)"),
    )
    try:
        yield controller, database
    finally:
        await controller.shutdown(stop_engines=False)
        database.close()


def _import(database: Database, version: str) -> None:
    with database.session() as session:
        import_backends(session, CUSTOM_YAML.format(version=version))


async def test_the_catalog_is_built_once_across_ticks(setup: tuple[Controller, Database]) -> None:
    controller, _ = setup
    await controller.reconcile()
    built = controller.catalog
    for _ in range(3):
        await controller.reconcile()
        assert controller.catalog is built


async def test_a_custom_backend_added_edited_or_removed_is_in_the_next_tick(
    setup: tuple[Controller, Database],
) -> None:
    controller, database = setup
    await controller.reconcile()
    with pytest.raises(NotFound):
        controller.catalog.get("my-engine")
    _import(database, "1.0")
    await controller.reconcile()
    assert set(controller.catalog.get("my-engine").versions) == {"1.0"}
    _import(database, "2.0")  # replaces the backend with another version
    await controller.reconcile()
    assert set(controller.catalog.get("my-engine").versions) == {"2.0"}
    with database.session() as session:
        remove_backend(session, "my-engine")
    await controller.reconcile()
    with pytest.raises(NotFound):
        controller.catalog.get("my-engine")
