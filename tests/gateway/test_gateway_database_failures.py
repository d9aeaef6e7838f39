"""A database that fails in the middle of a request: a clear 503, and a log line naming the request.

The gateway reads the database on a request's path in two places only: an API key it has not
cached, and why a deployment has no ready replica. A gateway of its own, over a real SQLite file
from which a test takes a table away (renamed, so every query of it fails as it would on a
broken database).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from modelyard.server.context import ServerContext
from modelyard.settings import Settings
from modelyard.store.database import Database
from modelyard.testing.http_clients import shared_tls_context

from .conftest import GatewayHarness


@pytest.fixture
def failing(tmp_path: Path) -> Iterator[tuple[GatewayHarness, Path]]:
    database_file = tmp_path / "modelyard.db"
    database = Database.open("sqlite:///" + str(database_file))
    settings = Settings(data_dir=tmp_path, deploy_demo=False)
    harness = GatewayHarness(database=database, context=ServerContext(settings=settings, database=database))
    harness.start()
    yield harness, database_file
    harness.stop()
    database.close()


def take_away(database_file: Path, table: str) -> None:
    with sqlite3.connect(database_file) as connection:
        connection.execute(f"ALTER TABLE {table} RENAME TO {table}_gone")


def post(harness: GatewayHarness, key: str, model: str, request_id: str) -> httpx.Response:
    return httpx.post(
        harness.base_url + "/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {key}", "x-request-id": request_id},
        timeout=30,
        verify=shared_tls_context(),
    )


def gateway_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name.startswith("modelyard.server")]


def test_a_key_check_the_database_cannot_answer_is_a_503_logged_with_the_request_id(
    failing: tuple[GatewayHarness, Path], caplog: pytest.LogCaptureFixture
) -> None:
    harness, database_file = failing
    key = harness.create_key()  # not yet cached: the request reads api_keys
    take_away(database_file, "api_keys")
    with caplog.at_level(logging.WARNING, logger="modelyard.server"):
        response = post(harness, key, "anything", "keys-down-1")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "key_check_unavailable"
    lines = gateway_lines(caplog)
    assert lines and all("keys-down-1" in line for line in lines), lines


def test_an_unready_deployment_the_database_cannot_describe_is_a_503_logged_with_the_request_id(
    failing: tuple[GatewayHarness, Path], caplog: pytest.LogCaptureFixture
) -> None:
    harness, database_file = failing
    key = harness.create_key()
    harness.publish("no-replica", [])
    assert post(harness, key, "no-replica", "warm-up").status_code == 503  # the key is cached now
    take_away(database_file, "deployments")
    with caplog.at_level(logging.WARNING, logger="modelyard.server"):
        response = post(harness, key, "no-replica", "instances-down-2")
    assert response.status_code == 503
    assert response.json()["error"]["message"] == (
        "deployment 'no-replica' has no ready replica "
        "(see why with `modelyard ps` and `modelyard logs no-replica`)"
    )
    lines = gateway_lines(caplog)
    assert lines and all("instances-down-2" in line for line in lines), lines
