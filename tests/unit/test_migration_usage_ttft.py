"""Revision 0015 on a database written at 0014: every usage row stays as it was, with no time to
first token (NULL); a row can then store one; a downgrade drops the column and keeps the rows.
On a SQLite file and on PostgreSQL. Revision 0015 follows 0014 and is the one head of the history.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import command
from alembic.script import ScriptDirectory

from modelyard.store.database import Database, alembic_config, create_database_engine
from modelyard.store.tables import UsageRecord

BEFORE = "0014_db_sessions"
AT = datetime(2026, 11, 30, 12, tzinfo=UTC)


def _migrate(url: str, revision: str, *, down: bool = False) -> None:
    config = alembic_config(url)
    engine = create_database_engine(url)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        (command.downgrade if down else command.upgrade)(config, revision)
    engine.dispose()


def _usage_columns(url: str) -> set[str]:
    engine = create_database_engine(url)
    columns = {column["name"] for column in sa.inspect(engine).get_columns("usage_records")}
    engine.dispose()
    return columns


def _rows_at_0014(url: str) -> None:
    """Three requests as a 0014 server wrote them (Core: the model already has ttft_ms)."""
    usage = sa.table(
        "usage_records",
        *(sa.column(name) for name in ("deployment_name", "endpoint", "prompt_tokens", "completion_tokens")),
        sa.column("usage_reported"),
        sa.column("status_code"),
        sa.column("at"),
        sa.column("request_id"),
    )
    engine = create_database_engine(url)
    with engine.begin() as connection:
        connection.execute(
            sa.insert(usage),
            [
                {
                    "deployment_name": "chat",
                    "endpoint": "/v1/chat/completions",
                    "prompt_tokens": index,
                    "completion_tokens": 1,
                    "usage_reported": True,
                    "status_code": 200,
                    "at": AT,
                    "request_id": f"before-{index}",
                }
                for index in range(3)
            ],
        )
    engine.dispose()


def test_every_usage_row_stays_without_a_ttft_and_new_rows_store_one(database_url: str) -> None:
    _migrate(database_url, BEFORE)
    assert "ttft_ms" not in _usage_columns(database_url)
    _rows_at_0014(database_url)
    database = Database.open(database_url)  # to head: 0015 and whatever follows it
    try:
        with database.session() as session:
            session.add(
                UsageRecord(deployment_name="chat", endpoint="/v1/chat/completions", at=AT, ttft_ms=87.5)
            )
            session.commit()
            stored = session.execute(
                sa.select(UsageRecord.request_id, UsageRecord.prompt_tokens, UsageRecord.ttft_ms).order_by(
                    UsageRecord.id
                )
            ).all()
    finally:
        database.close()
    assert [tuple(row) for row in stored] == [
        ("before-0", 0, None),
        ("before-1", 1, None),
        ("before-2", 2, None),
        (None, 0, 87.5),
    ]
    _migrate(database_url, BEFORE, down=True)
    assert "ttft_ms" not in _usage_columns(database_url)
    engine = create_database_engine(database_url)
    with engine.connect() as connection:
        count = connection.scalar(sa.text("SELECT count(*) FROM usage_records"))
    engine.dispose()
    assert count == 4


def test_the_history_has_one_head_after_the_ttft_revision() -> None:
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert script.get_heads() == ["0015_usage_ttft"]
    assert script.get_revision("0015_usage_ttft").down_revision == BEFORE
