"""The Alembic history stays one line: several engineers add revisions, and two revisions with
the same parent (two heads) stop every server start with "Multiple head revisions"."""

from __future__ import annotations

from alembic.script import ScriptDirectory

from modelyard.store.database import alembic_config


def test_the_migrations_have_one_head_and_unique_revision_ids() -> None:
    scripts = ScriptDirectory.from_config(alembic_config("sqlite://"))
    heads = scripts.get_heads()
    assert len(heads) == 1, f"migration heads {heads}: chain the newest revision onto the other"
    revisions = [revision.revision for revision in scripts.walk_revisions()]
    assert len(revisions) == len(set(revisions)), revisions
