"""Fixtures every test directory can use: a database URL for each supported database, and the
test models (each built once, see ``model_cache.py``) with one engine serving the tiny one.

``database_url`` is parametrized over SQLite (a file in the test's tmp dir) and PostgreSQL (a
fresh database per test on the server named by ``MODELYARD_TEST_POSTGRES_URL``, which
``scripts/test-postgres.sh start`` prints). Without that variable the PostgreSQL cases are
skipped locally and fail under CI (``CI=true``), so CI cannot silently test one database only.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from model_cache import RECIPES, ModelCache
from tiny_engine import TinyEngine, run_tiny_engine

# The one simulated Ray cluster of the session (tests/ray_cluster.py); which tests share a worker
# under pytest -n (tests/parallel_groups.py).
pytest_plugins = ["ray_cluster", "parallel_groups", "group_timings", "oidc_site.fixture"]

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


# -- test models -----------------------------------------------------------------------------------

# Fixtures whose costly model is built in the background as soon as a test that needs it is collected.
BACKGROUND_BUILDS = {"trained_tiny_model_dir": "trained-tiny-qwen3", "field_core_dir": "field-core"}
_background_builders: list[subprocess.Popen[bytes]] = []


def _xdist_worker() -> str | None:
    """This process's pytest-xdist worker name (``gw0``, ...), None outside ``pytest -n``."""
    return os.environ.get("PYTEST_XDIST_WORKER")


def pytest_collection_finish(session: pytest.Session) -> None:
    # Under pytest -n every worker collects the same tests; the first one starts the builds (the
    # cache's lock file makes any other process that needs the model wait for that build).
    if session.config.option.collectonly or _xdist_worker() not in (None, "gw0"):
        return
    needed = {
        BACKGROUND_BUILDS[name]
        for item in session.items
        for name in getattr(item, "fixturenames", ())
        if name in BACKGROUND_BUILDS
    }
    cache = ModelCache.default()
    for recipe in sorted(needed):
        if RECIPES[recipe].costly and not cache.is_built(recipe):
            _background_builders.append(cache.start_background_build(recipe))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for builder in _background_builders:
        if builder.poll() is None and _xdist_worker() is not None:
            builder.wait()  # other workers may still be waiting for the model: let it finish
        elif builder.poll() is None:
            builder.terminate()
            builder.wait(timeout=30)


@pytest.fixture(scope="session")
def test_models() -> ModelCache:
    """The cache of test models: ``test_models.copy(name, path)`` gives a private copy."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return ModelCache.default()


@pytest.fixture(scope="session")
def tiny_model_dir(test_models: ModelCache, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real (tiny, random-weight) Qwen3-format model directory, shared by the session."""
    return test_models.copy("tiny-qwen3", tmp_path_factory.mktemp("models") / "tiny-qwen3")


@pytest.fixture(scope="session")
def trained_tiny_model_dir(test_models: ModelCache, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model trained to think and call a tool (``modelyard.testing.trained_tiny_model``)."""
    return test_models.copy("trained-tiny-qwen3", tmp_path_factory.mktemp("models") / "thinker")


@pytest.fixture(scope="session")
def field_core_dir(test_models: ModelCache, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tokenizer/`` (the small TEST tokenizer) and ``core/`` (a field core trained with it)."""
    return test_models.copy("field-core", tmp_path_factory.mktemp("field-core") / "field-core")


@pytest.fixture(scope="session")
def tiny_engine(test_models: ModelCache, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinyEngine]:
    """One engine for the session: the built-in transformers version rendered as is, serving the tiny
    model from a directory whose name has a space (it must stay one argument)."""
    model_path = test_models.copy("tiny-qwen3", tmp_path_factory.mktemp("engine") / "tiny qwen3")
    with run_tiny_engine(model_path, tmp_path_factory.mktemp("engine-log") / "engine.log") as engine:
        yield engine
