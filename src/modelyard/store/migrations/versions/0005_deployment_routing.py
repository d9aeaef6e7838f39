"""deployments.routing: how the gateway picks a replica (least-outstanding or prefix)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 23:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("deployments") as batch:
        batch.add_column(
            sa.Column("routing", sa.String(length=32), nullable=False, server_default="least-outstanding")
        )


def downgrade() -> None:
    with op.batch_alter_table("deployments") as batch:
        batch.drop_column("routing")
