"""autoscale: deployments.autoscale (replicas on load) and autoscale_events (its decisions)

Revision ID: 0012_autoscale
Revises: 0011_start_observations
Create Date: 2026-12-07 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_autoscale"
down_revision = "0011_start_observations"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("deployments") as batch:
        batch.add_column(sa.Column("autoscale", sa.JSON(), nullable=True))
    op.create_table(
        "autoscale_events",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("deployment_name", sa.String(128), nullable=False),
        sa.Column("deployment_uid", sa.String(32), nullable=False),
        sa.Column("direction", sa.String(16), nullable=False),
        sa.Column("from_replicas", sa.Integer(), nullable=False),
        sa.Column("to_replicas", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_autoscale_events_deployment_name", "autoscale_events", ["deployment_name"])
    op.create_index("ix_autoscale_events_deployment_uid", "autoscale_events", ["deployment_uid"])


def downgrade() -> None:
    op.drop_table("autoscale_events")
    with op.batch_alter_table("deployments") as batch:
        batch.drop_column("autoscale")
