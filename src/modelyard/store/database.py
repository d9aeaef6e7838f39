"""Opening the database and bringing its schema up to date.

SQLite (a file in the data directory, WAL journal) by default; PostgreSQL by URL. The schema is
owned by Alembic: ``Database.open`` runs every pending migration before anything else touches
the tables.

Usage::

    database = Database.open("sqlite:////tmp/modelyard.db")
    with database.session() as session:
        session.add(...)
        session.commit()
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.orm import Session, sessionmaker

from modelyard.errors import InvalidInput

logger = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def _normalise_url(url: str) -> str:
    """Let users write ``postgresql://`` and get the psycopg 3 driver we ship."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def _enable_sqlite_pragmas(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=10000")
        cursor.close()


def create_database_engine(url: str) -> Engine:
    url = _normalise_url(url)
    try:
        parsed = make_url(url)
    except ArgumentError as error:
        raise InvalidInput(
            f"database URL {url!r} is not a URL",
            hint="use sqlite:////path/to/file.db or postgresql://user:password@host/dbname",
        ) from error
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            database_file = Path(parsed.database)
            database_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            # Made 0600 before SQLite opens it; SQLite gives its -wal and -shm files the same mode.
            os.close(os.open(database_file, os.O_WRONLY | os.O_CREAT, 0o600))
        engine = create_engine(url, connect_args={"check_same_thread": False})
        _enable_sqlite_pragmas(engine)
        return engine
    if parsed.get_backend_name() != "postgresql":
        raise InvalidInput(
            f"database {parsed.get_backend_name()!r} is not supported",
            hint="use sqlite:///... or postgresql://...",
        )
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # ConfigParser interpolation: a % in a password must be doubled.
    config.set_main_option("sqlalchemy.url", _normalise_url(url).replace("%", "%%"))
    return config


@dataclass
class Database:
    engine: Engine
    session_factory: sessionmaker[Session]

    @classmethod
    def open(cls, url: str, *, migrate: bool = True) -> Database:
        engine = create_database_engine(url)
        if migrate:
            config = alembic_config(url)
            with engine.begin() as connection:
                config.attributes["connection"] = connection
                command.upgrade(config, "head")
        return cls(engine=engine, session_factory=sessionmaker(engine, expire_on_commit=False))

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self.session_factory() as session:
            yield session

    def close(self) -> None:
        self.engine.dispose()
