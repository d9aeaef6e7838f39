"""a request id on usage rows, so that a row replayed from the usage journal is written once

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 23:45:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("usage_records") as table:
        table.add_column(sa.Column("request_id", sa.String(length=32), nullable=True))
        table.create_unique_constraint("uq_usage_records_request_id", ["request_id"])


def downgrade() -> None:
    with op.batch_alter_table("usage_records") as table:
        table.drop_constraint("uq_usage_records_request_id", type_="unique")
        table.drop_column("request_id")
