"""usage_ttft: each request's time to first token, as the gateway saw it (usage_records.ttft_ms)

Revision ID: 0015_usage_ttft
Revises: 0014_db_sessions
Create Date: 2026-12-07 17:45:00

One nullable column: every row already there stays as it was, with no time to first token
(NULL: the gateway did not record one, as for an error or a request from before this revision).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_usage_ttft"
down_revision = "0014_db_sessions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("usage_records") as batch:
        batch.add_column(sa.Column("ttft_ms", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("usage_records") as batch:
        batch.drop_column("ttft_ms")
