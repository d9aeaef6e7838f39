"""deployments.placement (memory, nodes, selectors) and instances.placement (workers, ranks, knob)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02 01:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("deployments") as batch:
        batch.add_column(sa.Column("placement", sa.JSON(), nullable=True))
    with op.batch_alter_table("instances") as batch:
        batch.add_column(sa.Column("placement", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.drop_column("placement")
    with op.batch_alter_table("deployments") as batch:
        batch.drop_column("placement")
