"""a request id on usage rows (a row replayed from the usage journal is written once); limits per API key

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


_KEY_LIMITS = ("requests_per_minute", "tokens_per_minute", "max_concurrent_requests")


def upgrade() -> None:
    with op.batch_alter_table("usage_records") as table:
        table.add_column(sa.Column("request_id", sa.String(length=32), nullable=True))
        table.create_unique_constraint("uq_usage_records_request_id", ["request_id"])
    with op.batch_alter_table("api_keys") as table:
        for name in _KEY_LIMITS:
            table.add_column(sa.Column(name, sa.Integer(), nullable=True))
        table.add_column(sa.Column("token_quota", sa.BigInteger(), nullable=True))
        table.add_column(sa.Column("quota_period", sa.String(length=8), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as table:
        for name in (*_KEY_LIMITS, "token_quota", "quota_period"):
            table.drop_column(name)
    with op.batch_alter_table("usage_records") as table:
        table.drop_constraint("uq_usage_records_request_id", type_="unique")
        table.drop_column("request_id")
