"""Revision 0014 on a database written before it (a single-admin installation, at 0013 after
tests/unit/test_migration_teams.py's upgrade from 0011): the admin and their keys stay, a session
and a provider's identity can be stored for them, deleting the user deletes both, and a downgrade
drops the two tables again. On a SQLite file and on PostgreSQL. Revision 0014 follows 0013
(0015, ``test_migration_usage_ttft.py``, follows it)."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic.script import ScriptDirectory

from modelyard.store.database import Database, alembic_config, create_database_engine
from modelyard.store.sign_in_tables import ConsoleSessionRow, ExternalIdentity
from modelyard.store.tables import ApiKey, User
from modelyard.testing.migrations import migrate_to

NOW = datetime(2026, 12, 1, tzinfo=UTC)
BEFORE = "0013_teams_projects_audit"


def test_the_admin_and_keys_stay_and_sessions_can_be_stored(database_url: str) -> None:
    migrate_to(database_url, BEFORE)
    database = Database.open(database_url, migrate=False)
    with database.session() as session:
        session.add(User(username="admin", password_hash="scrypt$...", is_admin=True))
        session.add(ApiKey(name="team", prefix="my-1234", key_hash="0" * 64))
        session.commit()
    database.close()
    database = Database.open(database_url)  # to head: 0014 and whatever follows it
    try:
        with database.session() as session:
            admin = session.scalars(sa.select(User)).one()
            assert session.scalars(sa.select(ApiKey.name)).all() == ["team"]
            session.add(
                ConsoleSessionRow(
                    token_digest="a" * 64,
                    user_id=admin.id,
                    csrf_token="csrf",
                    password_digest="b" * 64,
                    method="password",
                    opened_at=NOW,
                    last_seen_at=NOW,
                )
            )
            session.add(
                ExternalIdentity(user_id=admin.id, issuer="https://id.example.org", subject="1", role="admin")
            )
            session.commit()
            session.delete(admin)
            session.commit()
            assert session.scalars(sa.select(ConsoleSessionRow)).all() == []
            assert session.scalars(sa.select(ExternalIdentity)).all() == []
    finally:
        database.close()
    migrate_to(database_url, BEFORE, down=True)
    engine = create_database_engine(database_url)
    tables = set(sa.inspect(engine).get_table_names())
    engine.dispose()
    assert "console_sessions" not in tables and "external_identities" not in tables
    assert {"users", "api_keys", "projects", "audit_events"} <= tables


def test_the_sessions_revision_follows_the_teams_revision() -> None:
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert script.get_revision("0014_db_sessions").down_revision == BEFORE
    assert script.get_revision(BEFORE).down_revision == "0012_autoscale"
