"""Moving a test database to one revision of the schema's history, up or down.

The migration tests write rows as an older release stored them: they stop the history at that
release's revision, insert, then go on to the revision under test (or back down from it).
``Database.open`` only ever goes to the head.

Usage::

    migrate_to(url, "0011_start_observations")
    migrate_to(url, "0012_autoscale", down=True)
"""

from __future__ import annotations

from alembic import command

from modelyard.store.database import alembic_config, create_database_engine


def migrate_to(url: str, revision: str, *, down: bool = False) -> None:
    """Upgrade the database at ``url`` to ``revision`` (``down``: downgrade to it), in one
    transaction, on an engine of its own that is disposed of afterwards."""
    config = alembic_config(url)
    engine = create_database_engine(url)
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            (command.downgrade if down else command.upgrade)(config, revision)
    finally:
        engine.dispose()
