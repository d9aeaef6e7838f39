"""Revision 0010 on a database written before it: every model stored then is on the server's host
(``on_server`` true), no row is lost, and a copy on a worker can be stored; a downgrade drops the
table and the column again. On a SQLite file and on PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa

from modelyard.store.database import Database, create_database_engine
from modelyard.store.tables import ModelFile, WorkerModel
from modelyard.testing.migrations import migrate_to

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def test_models_stored_before_are_on_the_server_and_copies_on_workers_can_be_kept(database_url: str) -> None:
    migrate_to(database_url, "0008_verification")
    engine = create_database_engine(database_url)
    models = sa.Table("model_files", sa.MetaData(), autoload_with=engine)
    with engine.begin() as connection:
        connection.execute(
            models.insert(),
            [
                {
                    "name": "qwen",
                    "source": "local",
                    "path": "/models/qwen",
                    "state": "valid",
                    "reasons": [],
                    "details": {},
                    "created_at": NOW,
                    "updated_at": NOW,
                },
            ],
        )
    engine.dispose()
    database = Database.open(database_url)
    try:
        with database.session() as session:
            [model] = session.scalars(sa.select(ModelFile)).all()
            assert model.name == "qwen" and model.on_server is True
            session.add(WorkerModel(model_file_id=model.id, worker="gpu-2", state="verified", details={}))
            session.commit()
            assert session.scalars(sa.select(WorkerModel.worker)).all() == ["gpu-2"]
    finally:
        database.close()
    migrate_to(database_url, "0008_verification", down=True)
    engine = create_database_engine(database_url)
    inspector = sa.inspect(engine)
    assert "worker_models" not in inspector.get_table_names()
    assert "on_server" not in {column["name"] for column in inspector.get_columns("model_files")}
    engine.dispose()
