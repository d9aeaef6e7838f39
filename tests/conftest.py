"""Fixtures every test directory can use: a database URL for each supported database.

``database_url`` is parametrized over SQLite (a file in the test's tmp dir) and PostgreSQL (a
fresh database per test on the server named by ``MODELYARD_TEST_POSTGRES_URL``, which
``scripts/test-postgres.sh start`` prints). Without that variable the PostgreSQL cases are
skipped locally and fail under CI (``CI=true``), so CI cannot silently test one database only.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

POSTGRES_URL_VARIABLE = "MODELYARD_TEST_POSTGRES_URL"


def _postgres_server_url() -> str | None:
    url = os.environ.get(POSTGRES_URL_VARIABLE)
    if url:
        return url
    if os.environ.get("CI"):
        pytest.fail(
            f"{POSTGRES_URL_VARIABLE} is not set under CI: start PostgreSQL with scripts/test-postgres.sh"
        )
    return None


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test; dropped afterwards."""
    server_url = _postgres_server_url()
    if server_url is None:
        pytest.skip(f'{POSTGRES_URL_VARIABLE} not set (run: eval "$(bash scripts/test-postgres.sh start)")')
    name = f"test_{uuid.uuid4().hex[:12]}"
    admin_url = make_url(server_url.replace("postgresql://", "postgresql+psycopg://", 1))
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin_url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :name"),
                {"name": name},
            )
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each test using this runs twice: on a SQLite file and on a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'modelyard.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url
