"""deployments: requests_per_minute, tokens_per_minute, max_concurrent_requests (every key together)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02 02:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

COLUMNS = ("requests_per_minute", "tokens_per_minute", "max_concurrent_requests")


def upgrade() -> None:
    with op.batch_alter_table("deployments") as batch:
        for column in COLUMNS:
            batch.add_column(sa.Column(column, sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("deployments") as batch:
        for column in reversed(COLUMNS):
            batch.drop_column(column)
