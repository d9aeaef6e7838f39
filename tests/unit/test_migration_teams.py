"""Revision 0013 (teams) on a database holding an installation of 0011 (one admin, a model, a
deployment with an instance, a key with limits, usage rows), upgraded through 0012 (autoscale):
every row is still there and reachable, the admin is an ``admin``, the deployment and the key are
in the project ``default``, and new keys and deployments go there too. A downgrade to 0012 gives
back its tables, the deployment's autoscale column included. On a SQLite file and on
PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa

from modelyard.services.keys import create_key
from modelyard.services.usage import usage_by_key_and_deployment
from modelyard.store.database import Database, create_database_engine
from modelyard.store.tables import DEFAULT_PROJECT, ApiKey, AuditEvent, Deployment, Project, UsageRecord, User
from modelyard.testing.migrations import migrate_to

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _insert(engine: sa.Engine, table_name: str, rows: list[dict[str, object]]) -> None:
    table = sa.Table(table_name, sa.MetaData(), autoload_with=engine)
    with engine.begin() as connection:
        connection.execute(table.insert(), rows)


def _installation_at_0011(url: str) -> None:
    migrate_to(url, "0011_start_observations")
    engine = create_database_engine(url)
    _insert(
        engine,
        "users",
        [
            {
                "id": 1,
                "username": "admin",
                "password_hash": "scrypt$x",
                "is_admin": True,
                "created_at": NOW,
                "password_changed_at": NOW,
            }
        ],
    )
    _insert(
        engine,
        "model_files",
        [
            {
                "id": 1,
                "name": "qwen",
                "source": "local",
                "path": "/models/qwen",
                "state": "valid",
                "reasons": [],
                "details": {},
                "created_at": NOW,
                "updated_at": NOW,
            }
        ],
    )
    _insert(
        engine,
        "deployments",
        [
            {
                "id": 1,
                "uid": "d" * 32,
                "name": "chat",
                "model_file_id": 1,
                "backend": "vllm",
                "backend_version": "0.25.0",
                "replicas": 1,
                "gpus_per_replica": 1,
                "backend_parameters": [],
                "env": {},
                "desired_state": "running",
                "skip_verification": False,
                "routing": "least-outstanding",
                "requests_per_minute": 60,
                "warnings": [],
                "created_at": NOW,
                "updated_at": NOW,
            }
        ],
    )
    _insert(
        engine,
        "instances",
        [
            {
                "id": 1,
                "uid": "i" * 32,
                "runtime": "process",
                "deployment_id": 1,
                "replica_index": 0,
                "state": "running",
                "reason": "",
                "host": "127.0.0.1",
                "port": 9000,
                "gpu_ids": [0],
                "command": [],
                "start_count": 1,
                "restart_count": 0,
                "verification": [],
                "updated_at": NOW,
            }
        ],
    )
    _insert(
        engine,
        "api_keys",
        [
            {
                "name": "ci",
                "prefix": "my-abc",
                "key_hash": "h" * 64,
                "allowed_deployments": ["chat"],
                "created_at": NOW,
                "token_quota": 5000,
                "quota_period": "month",
            }
        ],
    )
    _insert(
        engine,
        "usage_records",
        [
            {
                "api_key_id": 1,
                "deployment_name": "chat",
                "endpoint": "/v1/chat/completions",
                "prompt_tokens": 10,
                "completion_tokens": 20 + index,
                "usage_reported": True,
                "status_code": 200,
                "at": NOW,
                "request_id": f"r{index}",
            }
            for index in range(3)
        ],
    )
    engine.dispose()


def test_an_installation_at_0011_keeps_every_row_in_the_default_project(database_url: str) -> None:
    _installation_at_0011(database_url)
    database = Database.open(database_url)  # upgrades to the head, through 0012 and 0013
    try:
        with database.session() as session:
            [project] = session.scalars(sa.select(Project)).all()
            assert project.name == DEFAULT_PROJECT
            [admin] = session.scalars(sa.select(User)).all()
            assert (admin.username, admin.role, admin.is_admin, admin.disabled) == (
                "admin",
                "admin",
                True,
                False,
            )
            [deployment] = session.scalars(sa.select(Deployment)).all()
            assert (deployment.name, deployment.project_id, deployment.requests_per_minute) == (
                "chat",
                project.id,
                60,
            )
            assert [instance.port for instance in deployment.instances] == [9000]
            [key] = session.scalars(sa.select(ApiKey)).all()
            assert (key.name, key.key_hash, key.project_id, key.token_quota) == (
                "ci",
                "h" * 64,
                project.id,
                5000,
            )
            assert key.allowed_deployments == ["chat"]
            assert session.scalar(sa.select(sa.func.count()).select_from(UsageRecord)) == 3
            [row] = usage_by_key_and_deployment(session)
            assert (row.key, row.deployment, row.requests, row.completion_tokens) == ("ci", "chat", 3, 63)
            assert session.scalars(sa.select(AuditEvent)).all() == []
            # Made the way every path made them before projects: they land in ``default``.
            created = create_key(session, "new-key")
            assert created.record.project_id == project.id
    finally:
        database.close()
    migrate_to(database_url, "0012_autoscale", down=True)
    engine = create_database_engine(database_url)
    inspector = sa.inspect(engine)
    assert not {"projects", "project_members", "audit_events"} & set(inspector.get_table_names())
    assert "project_id" not in {column["name"] for column in inspector.get_columns("api_keys")}
    assert "role" not in {column["name"] for column in inspector.get_columns("users")}
    assert "autoscale" in {column["name"] for column in inspector.get_columns("deployments")}
    with engine.connect() as connection:
        assert connection.scalar(sa.text("SELECT count(*) FROM usage_records")) == 3
        assert connection.scalar(sa.text("SELECT count(*) FROM api_keys")) == 2
    engine.dispose()
