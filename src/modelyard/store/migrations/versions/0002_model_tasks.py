"""model tasks: pulls from hubs, bundle imports and exports

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "model_tasks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("model_name", sa.String(length=128), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("target_path", sa.Text(), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("total_bytes", sa.BigInteger(), nullable=False),
        sa.Column("done_bytes", sa.BigInteger(), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("run_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("model_tasks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_model_tasks_model_name"), ["model_name"], unique=False)
        batch_op.create_index(batch_op.f("ix_model_tasks_state"), ["state"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("model_tasks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_model_tasks_state"))
        batch_op.drop_index(batch_op.f("ix_model_tasks_model_name"))
    op.drop_table("model_tasks")
