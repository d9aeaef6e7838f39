"""An audit row is written in the same transaction as the change it records: when the row cannot
be written, the change is not made either (no change without its row), and a refused change
leaves no row (no row without the change). On a SQLite file and on PostgreSQL; the audit log is
made to refuse every row by a trigger in the real database."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fastapi.testclient import TestClient
from sqlalchemy import func, select, text

from modelyard.store.database import Database
from modelyard.store.tables import ApiKey, AuditEvent, Project

from .conftest import ApiHarness, build_app

_SQLITE_TRIGGER = (
    "CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_events "
    "BEGIN SELECT RAISE(ABORT, 'the audit log refuses rows'); END"
)
_POSTGRESQL_TRIGGER = (
    "CREATE FUNCTION refuse_audit() RETURNS trigger AS $$ "
    "BEGIN RAISE EXCEPTION 'the audit log refuses rows'; END $$ LANGUAGE plpgsql",
    "CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_events FOR EACH ROW EXECUTE FUNCTION refuse_audit()",
)


@contextmanager
def _audit_log_refusing_rows(database: Database) -> Iterator[None]:
    statements = (_SQLITE_TRIGGER,) if database.engine.dialect.name == "sqlite" else _POSTGRESQL_TRIGGER
    with database.engine.begin() as connection:
        for statement in statements:
            connection.execute(text(statement))
    try:
        yield
    finally:
        with database.engine.begin() as connection:
            on_table = "" if len(statements) == 1 else " ON audit_events"
            connection.execute(text("DROP TRIGGER refuse_audit" + on_table))


def _count(database: Database, table: type[ApiKey] | type[AuditEvent] | type[Project], **where: str) -> int:
    with database.session() as session:
        query = select(func.count()).select_from(table).filter_by(**where)
        return int(session.scalar(query) or 0)


def test_a_change_whose_audit_row_cannot_be_written_is_not_made(api: ApiHarness) -> None:
    with TestClient(build_app(api.context), raise_server_exceptions=False) as client:
        client.auth = ("admin", api.password)
        with _audit_log_refusing_rows(api.database):
            made = client.post("/api/v1/keys", json={"name": "unrecorded"})
            project = client.post("/api/v1/projects", json={"name": "unrecorded"})
        assert made.status_code >= 500 and project.status_code >= 500, (made.text, project.text)
        assert _count(api.database, ApiKey, name="unrecorded") == 0
        assert _count(api.database, Project, name="unrecorded") == 0
        # With the audit log writable again, the same change is made and recorded together.
        assert client.post("/api/v1/keys", json={"name": "unrecorded"}).status_code == 201
    assert _count(api.database, ApiKey, name="unrecorded") == 1
    assert _count(api.database, AuditEvent, object_type="key", object_name="unrecorded", action="create") == 1


def test_a_refused_change_leaves_no_audit_row(api: ApiHarness) -> None:
    assert api.client.post("/api/v1/keys", json={"name": "twice"}).status_code == 201
    again = api.client.post("/api/v1/keys", json={"name": "twice"})
    assert again.status_code == 409, again.text
    assert _count(api.database, AuditEvent, object_type="key", object_name="twice", action="create") == 1
    assert _count(api.database, ApiKey, name="twice") == 1
